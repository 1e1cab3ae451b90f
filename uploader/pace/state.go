package pace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// State across restarts: per class the current window (limit, remaining,
// reset, use), a 429 hold and the share factor, and which route is in which
// class, in one JSON file replaced whole (temporary file, then rename).
//
// What must hold is that a restarted daemon never sends into a window it had
// spent. So the spending of a window's last slot is written (and fsynced)
// before the request that spends it leaves: Wait admits it, sees the class
// spent, and returns only after the write; a 429 is written as soon as it is
// read. Both are rare (once per window, once per 429). Every other change is
// written behind by Run, at most once per PersistInterval, without fsync
// (a file showing a spent window or a hold always is). A file can therefore
// be behind the server after a crash, never by the last slot: a loaded window
// with budget left is stale, one request at a time until an answer confirms
// it. A window whose Reset has passed is not loaded (its others' use is kept
// for the share factor). Times are local wall-clock; a loaded wait is capped
// at MaxWait like any other.

// fileVersion is the layout of pacer.json.
const fileVersion = 1

type stateFile struct {
	Version int            `json:"version"`
	Written time.Time      `json:"written"`
	Classes []savedClass   `json:"classes"`
	Routes  map[string]int `json:"routes"` // route → X-RateLimit-Limit of its class
	Reads   []string       `json:"reads,omitempty"`
}

type savedClass struct {
	Limit     int           `json:"limit"`
	Remaining int           `json:"remaining"` // less the requests in flight
	Reset     int64         `json:"reset"`     // the server's X-RateLimit-Reset
	ResetAt   time.Time     `json:"reset_at"`  // local time the window renews; zero: none current
	HoldUntil time.Time     `json:"hold_until,omitzero"`
	Own       int           `json:"own"` // in flight included
	Others    int           `json:"foreign"`
	Expect    int           `json:"expect"`
	Late      time.Duration `json:"late,omitempty"`
}

// store writes the state file. seq, spent and held are guarded by Pacer.mu;
// the file by fileMu, never taken with Pacer.mu held.
type store struct {
	path     string
	interval time.Duration
	log      zerolog.Logger
	kick     chan struct{} // a change for Run to write behind

	seq   uint64
	spent map[int]int64     // limit → Reset of the window the last urgent snapshot shows spent
	held  map[int]time.Time // limit → the hold it shows

	fileMu  sync.Mutex
	written uint64 // seq on disk
	failing bool
}

type snapshot struct {
	seq     uint64
	file    stateFile
	durable bool // shows a spent window or a hold: fsync
}

func newStore(path string, interval time.Duration, log zerolog.Logger) *store {
	if interval == 0 {
		interval = DefaultPersistInterval
	}
	return &store{path: path, interval: max(interval, 0), log: log, kick: make(chan struct{}, 1)}
}

// snapshot returns what must be on disk before the caller goes on (a window
// newly spent, a new hold), else asks Run to write behind and returns nil.
func (p *Pacer) snapshot(now time.Time) *snapshot {
	st := p.store
	if st == nil {
		return nil
	}
	for _, c := range p.classes {
		if c.current(now) && c.remaining-c.inFlight <= 0 && st.spent[c.limit] != c.reset ||
			c.hold.After(now) && c.hold.After(st.held[c.limit]) {
			return p.snapshotAll(now, true)
		}
	}
	select {
	case st.kick <- struct{}{}:
	default:
	}
	return nil
}

// snapshotAll takes the whole state.
func (p *Pacer) snapshotAll(now time.Time, durable bool) *snapshot {
	st := p.store
	st.seq++
	s := &snapshot{seq: st.seq, durable: durable, file: stateFile{Version: fileVersion, Written: now, Routes: map[string]int{}}}
	if durable {
		st.spent, st.held = map[int]int64{}, map[int]time.Time{}
	}
	for _, c := range p.classes {
		sc := savedClass{Limit: c.limit, Own: c.own + c.inFlight, Others: c.others, Expect: c.expect, Late: c.late}
		if c.current(now) {
			sc.Remaining, sc.Reset, sc.ResetAt = max(c.remaining-c.inFlight, 0), c.reset, c.resetAt
			if durable && sc.Remaining == 0 {
				st.spent[c.limit] = c.reset
			}
		}
		if c.hold.After(now) {
			sc.HoldUntil = c.hold
			if durable {
				st.held[c.limit] = c.hold
			}
		}
		s.file.Classes = append(s.file.Classes, sc)
	}
	for name, c := range p.routes {
		if c.limit > 0 {
			s.file.Routes[name] = c.limit
		}
	}
	for name := range p.reads {
		s.file.Reads = append(s.file.Reads, name)
	}
	return s
}

// Run writes the state behind, off the requests' path, at most once per
// PersistInterval, until ctx ends; then it writes the state once more and
// returns that write's error. Without a state file it only waits for ctx.
// The daemon runs it for as long as requests may be made.
func (p *Pacer) Run(ctx context.Context) error {
	st := p.store
	if st == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return p.Flush()
		case <-st.kick:
		}
		p.mu.Lock()
		s := p.snapshotAll(p.now(), false)
		p.mu.Unlock()
		p.write(s)
		select {
		case <-ctx.Done():
			return p.Flush()
		case <-time.After(st.interval):
		}
	}
}

// Flush writes the current state now (fsynced); nil without a state file.
func (p *Pacer) Flush() error {
	if p.store == nil {
		return nil
	}
	p.mu.Lock()
	s := p.snapshotAll(p.now(), true)
	p.mu.Unlock()
	p.write(s)
	p.store.fileMu.Lock()
	defer p.store.fileMu.Unlock()
	if p.store.written < s.seq {
		return fmt.Errorf("pace: cannot save the rate-limit state to %s", p.store.path)
	}
	return nil
}

// write writes s (nil: nothing) unless a later snapshot is on disk already.
func (p *Pacer) write(s *snapshot) {
	if s == nil {
		return
	}
	st := p.store
	st.fileMu.Lock()
	defer st.fileMu.Unlock()
	if s.seq <= st.written {
		return
	}
	if err := st.writeFile(s); err != nil {
		if !st.failing {
			st.log.Warn().Err(err).Str("path", st.path).Msg("cannot save the rate-limit state; a restart may probe a spent window")
		}
		st.failing = true
		p.mu.Lock()
		st.spent, st.held = nil, nil // nothing of it is on disk: the next change is urgent again
		p.mu.Unlock()
		return
	}
	if st.failing {
		st.log.Info().Str("path", st.path).Msg("rate-limit state saved again")
	}
	st.failing, st.written = false, s.seq
}

func (st *store) writeFile(s *snapshot) error {
	data, err := json.Marshal(s.file)
	if err != nil {
		return err
	}
	tmp := st.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && s.durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, st.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if s.durable { // the rename must reach the disk too
		d, err := os.Open(filepath.Dir(st.path))
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
	return nil
}

// load starts the pacer from the state file, if there is one.
func (p *Pacer) load() {
	data, err := os.ReadFile(p.store.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var f stateFile
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err == nil && f.Version != fileVersion {
		err = fmt.Errorf("version %d, want %d", f.Version, fileVersion)
	}
	if err != nil {
		p.log.Warn().Err(err).Str("path", p.store.path).Msg("ignoring the saved rate-limit state; the first requests will probe")
		return
	}
	now := p.now()
	ceiling := now.Add(p.maxWait + p.jitter)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range f.Classes {
		if s.Limit <= 0 {
			continue
		}
		c := p.classOf(s.Limit)
		c.expect, c.late = s.Expect, s.Late
		if now.Before(s.ResetAt) {
			c.remaining, c.reset, c.resetAt, c.stale = max(s.Remaining, 0), s.Reset, earlier(s.ResetAt, ceiling), true
			c.own, c.others = s.Own, s.Others
		} else {
			c.expect = max(c.expect, s.Others) // the window is over; who else spent it still counts
		}
		if now.Before(s.HoldUntil) {
			c.hold = earlier(s.HoldUntil, ceiling)
		}
	}
	for name, limit := range f.Routes {
		if limit > 0 {
			p.routes[name] = p.classOf(limit)
		}
	}
	for _, name := range f.Reads {
		p.reads[name] = true
	}
	p.log.Debug().Str("path", p.store.path).Int("classes", len(f.Classes)).Int("routes", len(f.Routes)).Msg("loaded the saved rate-limit state")
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

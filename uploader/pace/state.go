package pace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/splatd/splatd/watcher/trustfs"
)

// State across restarts: per class the current window (limit, remaining,
// reset, use) and the share factor, and which route is in which class, in
// one JSON file replaced whole (temporary file, then rename).
//
// What must hold is that a restarted daemon never sends into a window it had
// spent. So a request that leaves its class with nothing left (it spends the
// window's last slot, or a probe holds it) returns from Wait only once the
// file shows the class spent, and an answer that leaves its class spent (a
// 429, a Retry-After hold, the last count) is written before the release
// returns. Every other change is written behind by Run, at most once per
// PersistInterval. A file can therefore be behind the server after a crash,
// never by the last slot: a loaded window with budget left is loaded as an
// unknown window known by its Reset, so one request at a time goes until an
// answer tells the count (and what the file did not show of it is the last
// process's own). A spent window (or a 429 hold, saved as a spent window) is
// waited out. A window whose Reset has passed is not loaded (its others' use
// is kept for the share factor). Times are local wall-clock; a loaded wait
// is capped at MaxWait like any other.

// fileVersion is the layout of pacer.json; 2: a 429 hold is a spent window.
// A file of version 1 (before) loads too, its windows as they were, so an
// upgrade's restart does not probe a spent window; its 429 hold, if any, is
// lost (the server's next Retry-After brings it back).
const fileVersion = 2

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
	Others    int           `json:"foreign"`
	Expect    int           `json:"expect"`
	Late      time.Duration `json:"late,omitempty"`
}

// store writes the state file: under mu, which is taken before Pacer.mu and
// never while it is held, so each write takes the state as it is then.
type store struct {
	path     string
	interval time.Duration
	kick     chan struct{} // a change for Run to write behind
	mu       sync.Mutex
	failing  bool // under mu: the last write failed (logged once)
}

func newStore(path string, interval time.Duration) *store {
	if interval == 0 {
		interval = DefaultPersistInterval
	}
	return &store{path: path, interval: max(interval, 0), kick: make(chan struct{}, 1)}
}

// urgent says a class a request or answer touched (in) admits nothing more,
// so the file must show it before the caller goes on; else it asks Run to
// write behind. Called with p.mu held.
func (p *Pacer) urgent(now time.Time, in []*class) bool {
	if p.store == nil {
		return false
	}
	for _, c := range in {
		if c != nil && c.limit > 0 && c.blocked(now) > 0 {
			return true
		}
	}
	select {
	case p.store.kick <- struct{}{}:
	default:
	}
	return false
}

// save writes the whole state now, always fsynced (a power cut must not
// bring back an emptier file).
func (p *Pacer) save() error {
	st := p.store
	st.mu.Lock()
	defer st.mu.Unlock()
	p.mu.Lock()
	now := p.o.Now()
	f := stateFile{Version: fileVersion, Written: now, Routes: map[string]int{}}
	for _, c := range p.classes {
		sc := savedClass{Limit: c.limit, Others: c.others, Expect: c.expect, Late: c.late}
		if c.current(now) {
			sc.Remaining, sc.Reset, sc.ResetAt = max(c.remaining-c.inFlight, 0), c.reset, c.resetAt
		}
		f.Classes = append(f.Classes, sc)
	}
	for name, c := range p.routes {
		if c.limit > 0 {
			f.Routes[name] = c.limit
		}
	}
	for name := range p.reads {
		f.Reads = append(f.Reads, name)
	}
	p.mu.Unlock()
	// trustfs.WriteAtomic: a temp file fsynced, then renamed, the folder
	// fsynced, so that a crash leaves the old state or the new one.
	data, err := json.Marshal(f)
	if err == nil {
		err = trustfs.WriteAtomic("", st.path, data, 0o600)
	}
	switch {
	case err != nil && !st.failing:
		p.o.Logger.Warn().Err(err).Str("path", st.path).Msg("cannot save the rate-limit state; a restart may probe a spent window")
	case err == nil && st.failing:
		p.o.Logger.Info().Str("path", st.path).Msg("rate-limit state saved again")
	}
	st.failing = err != nil
	return err
}

// Run writes the state behind, off the requests' path, at most once per
// PersistInterval, until ctx ends; then it writes the state once more
// (fsynced) and returns that write's error. Without a state file it only
// waits for ctx. The daemon runs it for as long as requests may be made.
func (p *Pacer) Run(ctx context.Context) error {
	if p.store == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return p.Flush()
		case <-p.store.kick:
		}
		_ = p.save() // a failure is logged; the next change writes again
		select {
		case <-ctx.Done():
			return p.Flush()
		case <-time.After(p.store.interval):
		}
	}
}

// Flush writes the current state now (fsynced); nil without a state file.
func (p *Pacer) Flush() error {
	if p.store == nil {
		return nil
	}
	if err := p.save(); err != nil {
		return fmt.Errorf("pace: saving the rate-limit state: %w", err)
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
	if err == nil && f.Version != fileVersion && f.Version != 1 {
		err = fmt.Errorf("version %d, want %d", f.Version, fileVersion)
	}
	if err != nil {
		p.o.Logger.Warn().Err(err).Str("path", p.store.path).Msg("ignoring the saved rate-limit state; the first requests will probe")
		return
	}
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range f.Classes {
		if s.Limit <= 0 {
			continue
		}
		c := p.classOf(s.Limit)
		c.expect, c.late = s.Expect, s.Late
		if !now.Before(s.ResetAt) {
			c.expect = max(c.expect, s.Others) // the window is over; who else spent it still counts
			continue
		}
		// A window with budget is known by its Reset only, until an answer
		// confirms it; a spent one is waited out.
		c.reset, c.others = s.Reset, s.Others
		if s.Remaining == 0 {
			c.resetAt = earlier(s.ResetAt, now.Add(p.o.MaxWait+p.o.Jitter))
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
	p.o.Logger.Debug().Str("path", p.store.path).Int("classes", len(f.Classes)).Int("routes", len(f.Routes)).Msg("loaded the saved rate-limit state")
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

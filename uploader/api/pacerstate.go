package api

import (
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

// Pacer state across restarts.
//
// What must survive is small: per class the last known window (limit,
// remaining, reset, our and others' use of it), a 429 hold, and which route
// belongs to which class. It lives in one JSON file (<state_dir>/pacer.json),
// replaced whole (written to a temporary file, then renamed over it), so a
// reader sees the old content or the new, never a mix.
//
// The file is kept cheaply, and that is enough for the one thing that
// matters: a restarted daemon must not send into a window it had spent.
//
//   - The spending of a window's last slot is written, and fsynced, before
//     the request that spends it can leave: Wait takes the reservation, sees
//     that the class has nothing left, and returns only after the write. A
//     429 hold is written (fsynced) as soon as the 429 is read. Both are rare
//     (at most once per window per class, and once per 429), so the fsync is
//     off the ordinary path. Whatever the moment of a crash (SIGKILL, power),
//     if the last request of a window may have reached the server, the file
//     says the window is spent until its Reset.
//   - Every other change (an ordinary decrement, a new window with budget
//     left, a route learning its class) is written behind, by a goroutine
//     off the request's path, at most once per PersistInterval, without
//     fsync; a file that still shows a spent window
//     or a hold is always fsynced, so a power cut cannot put an emptier file
//     in its place. After a crash the file can therefore be behind: it may
//     show more remaining than the server has, never fewer than 1 when the
//     server has 0 by our own requests (that transition was written first).
//   - At load, a window whose Reset has passed is ignored (only its
//     neighbour counts are kept for the sharing estimate); a current window
//     with remaining 0 or a hold is waited out; a current window with budget
//     left is "unconfirmed": one request at a time until a response names the
//     window again. That request is safe by the previous point, and its
//     answer replaces the stale remaining with the server's.
//
// Times in the file are local wall-clock times; a wait loaded from it is
// capped at MaxWait like any other, so a clock stepped backwards across a
// restart cannot stall the daemon.

// stateVersion is the version of the pacer.json layout.
const stateVersion = 1

// pacerFile is pacer.json.
type pacerFile struct {
	Version int            `json:"version"`
	Written time.Time      `json:"written"`
	Classes []classState   `json:"classes"`
	Routes  map[string]int `json:"routes"` // route → X-RateLimit-Limit of its class
}

// classState is one class's window as the pacer knew it.
type classState struct {
	Limit       int       `json:"limit"`
	Remaining   int       `json:"remaining"` // less the requests in flight: an upper bound
	Reset       int64     `json:"reset"`     // the server's X-RateLimit-Reset, epoch seconds
	ResetAt     time.Time `json:"reset_at"`  // local time the window counts as renewed
	HoldUntil   time.Time `json:"hold_until,omitzero"`
	Own         int       `json:"own"` // our requests in the window, those in flight included
	Foreign     int       `json:"foreign"`
	PrevOwn     int       `json:"prev_own"`
	PrevForeign int       `json:"prev_foreign"`
}

// persister writes the pacer's state file. The fields under "guarded by
// Pacer.mu" are read and written with the pacer's lock held; the file itself
// is written under fileMu, never with the pacer's lock held.
type persister struct {
	path     string
	interval time.Duration
	log      zerolog.Logger

	// guarded by Pacer.mu
	seq       uint64
	lastWrite time.Time
	dirty     bool
	writing   bool              // a write behind is under way
	idle      *sync.Cond        // on Pacer.mu: broadcast when a write behind ends
	spentOut  map[int]int64     // limit → Reset of the window the last snapshot shows spent
	holdOut   map[int]time.Time // limit → hold the last snapshot shows

	fileMu  sync.Mutex
	written uint64 // seq of the snapshot on disk
	failing bool   // the last write failed (logged once per streak)
}

// stateSnapshot is one content of the file, taken under the pacer's lock.
type stateSnapshot struct {
	seq     uint64
	file    pacerFile
	durable bool // it shows a spent window or a hold: fsync
	sync    bool // the caller must not proceed before it is written
}

// snapshotLocked marks the state changed and returns what to write now: a
// snapshot that must be written before the caller goes on (the window's last
// slot spent, a new hold; or force), one written behind when behind is set
// (an answer came) and the interval has passed, or nil.
func (p *Pacer) snapshotLocked(now time.Time, force, behind bool) *stateSnapshot {
	ps := p.persist
	if ps == nil {
		return nil
	}
	ps.dirty = true
	urgent := force
	for _, b := range p.buckets {
		if b.limit == 0 {
			continue
		}
		if b.spent(now) && ps.spentOut[b.limit] != b.resetRaw {
			urgent = true
		}
		if b.holdUntil.After(now) && b.holdUntil.After(ps.holdOut[b.limit]) {
			urgent = true
		}
	}
	if !urgent && (!behind || ps.writing || now.Sub(ps.lastWrite) < ps.interval) {
		return nil
	}
	if !urgent {
		ps.writing = true
	}
	ps.seq++
	s := &stateSnapshot{seq: ps.seq, sync: urgent, file: pacerFile{
		Version: stateVersion, Written: now, Routes: map[string]int{},
	}}
	ps.spentOut, ps.holdOut = map[int]int64{}, map[int]time.Time{}
	for _, b := range p.buckets {
		if b.limit == 0 {
			continue
		}
		c := classState{Limit: b.limit, Own: b.own + b.inFlight, Foreign: b.foreign,
			PrevOwn: b.prevOwn, PrevForeign: b.prevForeign}
		if b.known && now.Before(b.resetAt) {
			c.Remaining, c.Reset, c.ResetAt = max(b.remaining-b.inFlight, 0), b.resetRaw, b.resetAt
		}
		if b.spent(now) {
			ps.spentOut[b.limit] = b.resetRaw
			s.durable = true
		}
		if b.holdUntil.After(now) {
			c.HoldUntil = b.holdUntil
			ps.holdOut[b.limit] = b.holdUntil
			s.durable = true
		}
		s.file.Classes = append(s.file.Classes, c)
	}
	for name, rt := range p.routes {
		if rt.bucket != nil && rt.bucket.limit > 0 {
			s.file.Routes[name] = rt.bucket.limit
		}
	}
	ps.lastWrite, ps.dirty = now, false
	return s
}

// spent says b's current window has nothing left for another request.
func (b *bucket) spent(now time.Time) bool {
	return b.known && now.Before(b.resetAt) && b.remaining-b.inFlight <= 0
}

// save writes s: at once when the caller must not go on before it is on
// disk, else in the background, off the request's path (nil: nothing to do).
func (ps *persister) save(p *Pacer, s *stateSnapshot) {
	if s == nil {
		return
	}
	if s.sync {
		ps.write(p, s)
		return
	}
	go func() {
		ps.write(p, s)
		p.mu.Lock()
		ps.writing = false
		ps.idle.Broadcast()
		p.mu.Unlock()
	}()
}

// write writes s (nil: nothing to do) unless a later snapshot is on disk
// already. It returns when the file holds s or a later state.
func (ps *persister) write(p *Pacer, s *stateSnapshot) {
	if s == nil {
		return
	}
	ps.fileMu.Lock()
	defer ps.fileMu.Unlock()
	if s.seq <= ps.written {
		return
	}
	if err := ps.writeFile(s); err != nil {
		if !ps.failing {
			ps.log.Warn().Err(err).Str("path", ps.path).
				Msg("cannot save the rate-limit state; a restart may probe a spent window")
		}
		ps.failing = true
		// Nothing of it is on disk: the next change writes again.
		p.mu.Lock()
		ps.spentOut, ps.holdOut, ps.dirty = nil, nil, true
		p.mu.Unlock()
		return
	}
	if ps.failing {
		ps.log.Info().Str("path", ps.path).Msg("rate-limit state saved again")
	}
	ps.failing = false
	ps.written = s.seq
}

func (ps *persister) writeFile(s *stateSnapshot) error {
	data, err := json.Marshal(s.file)
	if err != nil {
		return err
	}
	tmp := ps.path + ".tmp"
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
		err = os.Rename(tmp, ps.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if s.durable {
		// The rename itself must reach the disk, or a power cut could
		// bring back the file from before the window was spent.
		if d, err := os.Open(filepath.Dir(ps.path)); err == nil {
			err = d.Sync()
			_ = d.Close()
			return err
		}
	}
	return nil
}

// Flush writes the current state now (with a state file; else nothing).
// Ordinary changes are written behind, so the daemon may call it at
// shutdown; it is never needed for safety.
func (p *Pacer) Flush() error {
	if p.persist == nil {
		return nil
	}
	p.mu.Lock()
	p.persist.waitIdleLocked()
	s := p.snapshotLocked(p.now(), true, true)
	p.mu.Unlock()
	s.durable, s.sync = true, true
	p.persist.save(p, s)
	p.persist.fileMu.Lock()
	defer p.persist.fileMu.Unlock()
	if p.persist.written < s.seq {
		return fmt.Errorf("pacer: cannot save the rate-limit state to %s", p.persist.path)
	}
	return nil
}

// waitIdleLocked waits until no write behind is under way.
func (ps *persister) waitIdleLocked() {
	for ps.writing {
		ps.idle.Wait()
	}
}

// loadState starts the pacer from the state file, if there is one.
func (p *Pacer) loadState() {
	ps := p.persist
	data, err := os.ReadFile(ps.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var f pacerFile
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err == nil && f.Version != stateVersion {
		err = fmt.Errorf("version %d, want %d", f.Version, stateVersion)
	}
	if err != nil {
		p.log.Warn().Err(err).Str("path", ps.path).Msg("ignoring the saved rate-limit state; the first requests will probe")
		return
	}
	now := p.now()
	ceiling := now.Add(p.maxWait + p.jitter)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range f.Classes {
		if c.Limit <= 0 {
			continue
		}
		b := p.bucketLocked(c.Limit)
		b.resetRaw = c.Reset
		switch {
		case now.Before(c.ResetAt):
			b.known, b.unconfirmed = true, true
			b.remaining = max(c.Remaining, 0)
			b.resetAt = c.ResetAt
			if b.resetAt.After(ceiling) {
				b.resetAt = ceiling
			}
			b.own, b.foreign, b.prevOwn, b.prevForeign = c.Own, c.Foreign, c.PrevOwn, c.PrevForeign
		case now.Sub(c.ResetAt) < assumedWindow:
			// The window is over; who else spent it still says whether
			// the token is shared.
			b.prevOwn, b.prevForeign = c.Own, c.Foreign
		}
		if now.Before(c.HoldUntil) {
			b.holdUntil = c.HoldUntil
			if b.holdUntil.After(ceiling) {
				b.holdUntil = ceiling
			}
		}
	}
	for name, limit := range f.Routes {
		if limit > 0 {
			p.routes[name] = &routeState{name: name, bucket: p.bucketLocked(limit)}
		}
	}
	p.log.Debug().Str("path", ps.path).Int("classes", len(f.Classes)).Int("routes", len(f.Routes)).
		Msg("loaded the saved rate-limit state")
}

package pace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/splatd/splatd/watcher/trustfs"
)

// State across restarts: per class the current window and the share factor,
// and which route is in which class, in one JSON file replaced whole.
//
// What must hold is that a restarted daemon never sends into a window it had
// spent. So a request that leaves its class with nothing left (it spends the
// last slot, or a probe holds it) returns from Wait only once the file shows
// the class spent, and an answer that leaves its class spent (a 429, a
// Retry-After hold, the last count) is written before its release returns.
// So is an answer that names a route's class or a new window: a restart
// then knows every route's class and the window its last requests went in.
// The counts in between are not written (no write per request): a loaded
// window with budget left is known by its Reset only, so one request at a
// time goes until an answer tells the count, and what that count shows
// beyond the file's is the last process's own. A spent window is waited
// out; one whose Reset has passed is not loaded (its others' use still
// feeds expect). Flush writes everything at a clean stop. Times are local
// wall-clock; a loaded wait is capped at MaxWait.

// fileVersion is the layout of pacer.json; 2: a 429 hold is a spent window.
// Version 1 loads too (its windows as they were; a 429 hold is lost, and the
// server's next Retry-After brings it back).
const fileVersion = 2

type stateFile struct {
	Version int            `json:"version"`
	Written time.Time      `json:"written"` // for a reader; not loaded
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

// spent says a class that a request or answer touched (in) admits nothing
// more, so the file must show it before the caller goes on. Called with
// p.mu held.
func (p *Pacer) spent(now time.Time, in []*class) bool {
	return slices.ContainsFunc(in, func(c *class) bool {
		return c != nil && c.limit > 0 && c.blocked(now) > 0
	})
}

// save writes the whole state now, fsynced (a power cut must not bring back
// an emptier file), through a temporary file renamed over the old one; nil
// without a state file.
func (p *Pacer) save() error {
	if p.o.StateFile == "" {
		return nil
	}
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
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
	f.Reads = slices.Collect(maps.Keys(p.reads))
	p.mu.Unlock()
	data, err := json.Marshal(f)
	if err == nil {
		err = new(trustfs.FS).WriteAtomic("", p.o.StateFile, data, 0o600) // the state dir: no watch folder
	}
	if err != nil && !p.failing {
		p.o.Logger.Warn().Err(err).Str("path", p.o.StateFile).Msg("cannot save the rate-limit state; a restart may probe a spent window")
	} else if err == nil && p.failing {
		p.o.Logger.Info().Str("path", p.o.StateFile).Msg("rate-limit state saved again")
	}
	p.failing = err != nil
	return err
}

// Flush writes the current state now (fsynced); nil without a state file.
func (p *Pacer) Flush() error { return p.save() }

// load starts the pacer from the state file, if there is one.
func (p *Pacer) load() {
	data, err := os.ReadFile(p.o.StateFile)
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
		p.o.Logger.Warn().Err(err).Str("path", p.o.StateFile).Msg("ignoring the saved rate-limit state; the first requests will probe")
		return
	}
	now := p.o.Now()
	for _, s := range f.Classes {
		if s.Limit <= 0 {
			continue
		}
		c := p.classOf(s.Limit)
		c.expect, c.late = s.Expect, s.Late
		if !now.Before(s.ResetAt) { // over; who else spent it still counts
			c.expect = max(c.expect, s.Others)
			continue
		}
		c.reset, c.others = s.Reset, s.Others // with budget: known by its Reset only, until an answer confirms it
		if s.Remaining == 0 {                 // spent: waited out
			c.resetAt = s.ResetAt
			if limit := now.Add(p.o.MaxWait + p.o.Jitter); limit.Before(c.resetAt) {
				c.resetAt = limit
			}
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
	p.o.Logger.Debug().Str("path", p.o.StateFile).Int("classes", len(f.Classes)).Int("routes", len(f.Routes)).Msg("loaded the saved rate-limit state")
}

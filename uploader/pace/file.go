package pace

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/splatd/splatd/watcher/trustfs"
)

// stateFile is pacer.json: each class's window and share, each route's class.
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

// spent says a class in admits nothing more, which the file must show first; p.mu held.
func (p *Pacer) spent(now time.Time, in []*class) bool {
	return slices.ContainsFunc(in, func(c *class) bool { return c != nil && c.limit > 0 && c.blocked(now) > 0 })
}

// Flush writes the whole state, fsynced, over the old file; nil without a state file.
func (p *Pacer) Flush() error {
	if p.o.StateFile == "" {
		return nil
	}
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	p.mu.Lock()
	now := p.o.Now()
	f := stateFile{Version: fileVersion, Written: now, Routes: map[string]int{}, Reads: slices.Collect(maps.Keys(p.reads))}
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

// load starts from the state file (none: "" or absent); an unreadable one is logged and ignored.
func (p *Pacer) load() {
	data, err := os.ReadFile(p.o.StateFile)
	if p.o.StateFile == "" || os.IsNotExist(err) {
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
		if s.Remaining == 0 {                 // spent: waited out, at most MaxWait and the jitter
			c.resetAt = now.Add(min(s.ResetAt.Sub(now), p.o.MaxWait+p.o.Jitter))
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

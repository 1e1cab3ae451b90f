// Package meter shows the pool's long work as it goes: each storage
// upload's bytes sent and the long part of each job's check (a hash, a
// bundle, an encoding), with their recent rate and ETA.
package meter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress is the state of one running storage upload (Board.Uploads), or
// of the long part of a job's check (Board.Checks: its hash, its folder's
// bundle, its encoding), where Sent is the bytes done so far.
type Progress struct {
	Path string
	// Step is what a check does now (uploader.CheckHashing, CheckBundling,
	// CheckEncoding); "" for an upload.
	Step string
	Sent int64
	Size int64
	// Started is when this upload step began.
	Started time.Time
	// Rate is the recent upload rate in bytes per second (over the last
	// rateWindow; it falls to 0 while nothing is sent). ETA is the time
	// the rest would take at Rate; 0 when Rate is 0 (unknown).
	Rate float64
	ETA  time.Duration
}

// rateWindow is the span the rate is measured over: long enough to smooth
// the bursts of a paced upload, short enough to follow a new bandwidth
// limit within seconds. Samples are kept every rateSample at most.
const (
	rateWindow = 5 * time.Second
	rateSample = 250 * time.Millisecond
)

type samplePoint struct {
	at   time.Time
	sent int64
}

// entry is a running upload (or check) and its recent (time, bytes)
// samples.
type entry struct {
	Progress
	samples []samplePoint // oldest first
	last    time.Time     // of the last set
	// done, for a check, is its byte counter (Check): the bytes done now,
	// between two samples.
	done *atomic.Int64
}

// Board is one pool's running uploads and checks.
type Board struct {
	now func() time.Time

	mu      sync.Mutex
	uploads map[uint64]*entry
	checks  map[uint64]*entry
}

// New returns an empty board on the clock now.
func New(now func() time.Time) *Board {
	return &Board{now: now, uploads: make(map[uint64]*entry), checks: make(map[uint64]*entry)}
}

// Uploads returns the running uploads by job id, each with its current
// rate and ETA.
func (b *Board) Uploads() map[uint64]Progress { return b.of(b.uploads) }

// Checks returns, by job id, the checks running their long part, each with
// the bytes done, the total, its current rate and ETA, as Uploads does. A
// check's entry is gone once its Check stops.
func (b *Board) Checks() map[uint64]Progress { return b.of(b.checks) }

func (b *Board) of(m map[uint64]*entry) map[uint64]Progress {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[uint64]Progress, len(m))
	for k, e := range m {
		if e.done != nil {
			e.Sent = e.done.Load()
		}
		pr := e.Progress
		pr.Rate = e.rate(now)
		if pr.Rate > 0 && pr.Size > pr.Sent {
			pr.ETA = time.Duration(float64(pr.Size-pr.Sent) / pr.Rate * float64(time.Second))
		}
		out[k] = pr
	}
	return out
}

// Upload records the bytes sent of job id's upload; nil ends it.
func (b *Board) Upload(id uint64, pr *Progress) { b.set(b.uploads, id, pr, nil) }

// set records pr as job id's entry in m (nil ends it); done, when set, is
// the entry's live byte counter.
func (b *Board) set(m map[uint64]*entry, id uint64, pr *Progress, done *atomic.Int64) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if pr == nil {
		delete(m, id)
		return
	}
	e, ok := m[id]
	if !ok {
		e = &entry{}
		e.Started = now
		m[id] = e
	}
	started := e.Started
	e.Progress = *pr
	e.Started = started
	e.last = now
	e.done = done
	e.sample(now, pr.Sent)
}

// sample adds a point at most every rateSample and drops the points that
// no longer matter (all but the newest one older than the window).
func (e *entry) sample(now time.Time, sent int64) {
	if n := len(e.samples); n > 0 && now.Sub(e.samples[n-1].at) < rateSample {
		return
	}
	e.samples = append(e.samples, samplePoint{now, sent})
	cut := 0
	for i := range e.samples {
		if now.Sub(e.samples[i].at) > rateWindow {
			cut = i
		}
	}
	e.samples = e.samples[cut:]
}

// rate is the bytes per second from the oldest sample in the window (or
// the newest one before it) to the bytes sent now.
func (e *entry) rate(now time.Time) float64 {
	if len(e.samples) == 0 || now.Sub(e.last) > rateWindow {
		return 0 // nothing sent for a whole window: stalled
	}
	base := e.samples[0]
	for _, s := range e.samples {
		if now.Sub(s.at) <= rateWindow {
			break
		}
		base = s
	}
	el := now.Sub(base.at)
	if el < rateSample || e.Sent <= base.sent {
		return 0
	}
	return float64(e.Sent-base.sent) / el.Seconds()
}

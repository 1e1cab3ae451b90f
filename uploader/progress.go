package uploader

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/pace"
)

// Progress is the state of one running storage upload (Pool.Progress), or
// of the long part of a job's check (Pool.CheckProgress: its hash, its
// folder's bundle, its encoding), where Sent is the bytes done so far.
type Progress struct {
	Path string
	// Step is what a check does now (CheckHashing, CheckBundling,
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

type rateSamplePoint struct {
	at   time.Time
	sent int64
}

// progressEntry is a running upload (or check) and its recent (time,
// bytes) samples.
type progressEntry struct {
	Progress
	samples []rateSamplePoint // oldest first
	last    time.Time         // of the last setProgress
	// done, for a check, is its byte counter (checkMeter): the bytes done
	// now, between two samples.
	done *atomic.Int64
}

// Progress returns the running uploads by job id, each with its current
// rate and ETA.
func (p *Pool) Progress() map[uint64]Progress { return p.progressOf(p.progress) }

// CheckProgress returns, by job id, the checks running their long part
// (hashing the file, building a SOG folder's bundle, encoding it), each with
// the bytes done, the total, its current rate and ETA, as Progress does for
// uploads. A check's entry is gone once that part ends.
func (p *Pool) CheckProgress() map[uint64]Progress { return p.progressOf(p.checks) }

func (p *Pool) progressOf(m map[uint64]*progressEntry) map[uint64]Progress {
	now := p.o.Now()
	p.progMu.Lock()
	defer p.progMu.Unlock()
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

// setProgress records the bytes sent of job id's upload; nil ends it.
func (p *Pool) setProgress(id uint64, pr *Progress) { p.setProgressIn(p.progress, id, pr, nil) }

// setProgressIn records pr as job id's entry in m (nil ends it); done, when
// set, is the entry's live byte counter.
func (p *Pool) setProgressIn(m map[uint64]*progressEntry, id uint64, pr *Progress, done *atomic.Int64) {
	now := p.o.Now()
	p.progMu.Lock()
	defer p.progMu.Unlock()
	if pr == nil {
		delete(m, id)
		return
	}
	e, ok := m[id]
	if !ok {
		e = &progressEntry{}
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

// What a job's check does while CheckProgress reports it (Progress.Step).
const (
	CheckHashing  = content.Hashing
	CheckBundling = content.Bundling
	CheckEncoding = content.Encoding
	// CheckCompressing follows CheckEncoding once the encoder has read the
	// PLY's splats: it compresses the scene in memory, with no bytes to
	// count, often for longer than the read took.
	CheckCompressing = "compressing"
)

// checkMeter counts the bytes of one pass of a job's check as an io.Writer
// beside that pass (trustfs.HashTo, a bundle's io.MultiWriter, an
// io.TeeReader of the encoder's input): no second read. Each Write adds to
// an atomic counter, which CheckProgress reads; the pool's lock is taken
// at most once per rateSample, for the rate's samples. Writes come from the
// one goroutine of the pass.
type checkMeter struct {
	p    *Pool
	id   uint64
	pr   Progress
	done atomic.Int64
	next time.Time // of the next sample
	// hook, set by tests only (PoolOptions.workerHook, point "check:<step>"),
	// runs after each chunk is counted.
	hook func() error
}

// startCheck shows job j's check doing step over size bytes until the
// returned meter's stop.
func (p *Pool) startCheck(j state.Job, step string, size int64) *checkMeter {
	m := &checkMeter{p: p, id: j.ID, pr: Progress{Path: j.Path, Step: step, Size: size}}
	if p.o.workerHook != nil {
		m.hook = func() error { return p.hook("check:"+step, j) }
	}
	m.next = p.o.Now().Add(rateSample)
	p.setProgressIn(p.checks, j.ID, &m.pr, &m.done)
	return m
}

func (m *checkMeter) Write(b []byte) (int, error) {
	done := m.done.Add(int64(len(b)))
	if now := m.p.o.Now(); !now.Before(m.next) {
		m.next = now.Add(rateSample)
		pr := m.pr
		pr.Sent = done
		m.p.setProgressIn(m.p.checks, m.id, &pr, &m.done)
	}
	if m.hook != nil {
		if err := m.hook(); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

var _ io.Writer = (*checkMeter)(nil)

// compressing marks an encoding's read done: the encoder compresses now
// (CheckCompressing), with no more bytes to count. A PLY may hold data
// after its splats, which the encoder does not read: the count may stop
// short of the size.
func (m *checkMeter) compressing() {
	m.pr.Step = CheckCompressing
	pr := m.pr
	pr.Sent = m.done.Load()
	m.p.setProgressIn(m.p.checks, m.id, &pr, &m.done)
}

// stop ends the meter's entry.
func (m *checkMeter) stop() { m.p.setProgressIn(m.p.checks, m.id, nil, nil) }

// sample adds a point at most every rateSample and drops the points that
// no longer matter (all but the newest one older than the window).
func (e *progressEntry) sample(now time.Time, sent int64) {
	if n := len(e.samples); n > 0 && now.Sub(e.samples[n-1].at) < rateSample {
		return
	}
	e.samples = append(e.samples, rateSamplePoint{now, sent})
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
func (e *progressEntry) rate(now time.Time) float64 {
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

// RateDelays returns why the pacer delays a running job's request, by job id.
func (p *Pool) RateDelays() map[uint64]pace.Delay { return p.o.Client.Pacer().Delays() }

// Busy returns the jobs the workers hold now, and how many workers there are.
func (p *Pool) Busy() (running map[uint64]bool, workers int) {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	running = make(map[uint64]bool, len(p.running))
	for id := range p.running {
		running[id] = true
	}
	return running, p.o.Workers
}

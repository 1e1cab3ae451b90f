package uploader

import (
	"time"

	"github.com/splatd/splatd/uploader/pace"
)

// Progress is the state of one running storage upload.
type Progress struct {
	Path string
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

// progressEntry is a running upload and its recent (time, bytes) samples.
type progressEntry struct {
	Progress
	samples []rateSamplePoint // oldest first
	last    time.Time         // of the last setProgress
}

// Progress returns the running uploads by job id, each with its current
// rate and ETA.
func (p *Pool) Progress() map[uint64]Progress {
	now := p.o.Now()
	p.progMu.Lock()
	defer p.progMu.Unlock()
	out := make(map[uint64]Progress, len(p.progress))
	for k, e := range p.progress {
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
func (p *Pool) setProgress(id uint64, pr *Progress) {
	now := p.o.Now()
	p.progMu.Lock()
	defer p.progMu.Unlock()
	if pr == nil {
		delete(p.progress, id)
		return
	}
	e, ok := p.progress[id]
	if !ok {
		e = &progressEntry{}
		e.Started = now
		p.progress[id] = e
	}
	started := e.Started
	e.Progress = *pr
	e.Started = started
	e.last = now
	e.sample(now, pr.Sent)
}

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

// Holds returns why the pacer holds back a request of a running job, by job
// id: the jobs that wait on the API's rate limit now.
func (p *Pool) Holds() map[uint64]pace.Hold {
	p.progMu.Lock()
	defer p.progMu.Unlock()
	out := make(map[uint64]pace.Hold, len(p.holds))
	for k, h := range p.holds {
		out[k] = h
	}
	return out
}

// setHold records the pacer's hold of job id's request; a zero Hold ends it.
func (p *Pool) setHold(id uint64, h pace.Hold) {
	p.progMu.Lock()
	defer p.progMu.Unlock()
	if h == (pace.Hold{}) {
		delete(p.holds, id)
		return
	}
	p.holds[id] = h
}

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

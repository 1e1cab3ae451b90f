package uploader

import (
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/meter"
	"github.com/splatd/splatd/uploader/pace"
)

// Progress is the state of one running storage upload (Pool.Progress), or
// of the long part of a job's check (Pool.CheckProgress).
type Progress = meter.Progress

// Progress returns the running uploads by job id, each with its current
// rate and ETA.
func (p *Pool) Progress() map[uint64]Progress { return p.meters.Uploads() }

// CheckProgress returns, by job id, the checks running their long part
// (hashing the file, building a SOG folder's bundle, encoding it), as
// Progress does for uploads. A check's entry is gone once that part ends.
func (p *Pool) CheckProgress() map[uint64]Progress { return p.meters.Checks() }

// What a job's check does while CheckProgress reports it (Progress.Step).
const (
	CheckHashing  = content.Hashing
	CheckBundling = content.Bundling
	CheckEncoding = content.Encoding
)

// startCheck shows job j's check doing step over size bytes until the
// returned meter's Stop.
func (p *Pool) startCheck(j state.Job, step string, size int64) *meter.Check {
	var hook func() error // tests only (PoolOptions.workerHook, point "check:<step>")
	if p.o.workerHook != nil {
		hook = func() error { return p.hook("check:"+step, j) }
	}
	return p.meters.StartCheck(j.ID, j.Path, step, size, hook)
}

// RateDelays returns why the pacer delays a running job's request, by job id.
func (p *Pool) RateDelays() map[uint64]pace.Delay { return p.o.Client.Pacer().Delays() }

// Busy returns the jobs the workers run now, and how many workers there are.
func (p *Pool) Busy() (running map[uint64]bool, workers int) {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	running = make(map[uint64]bool, len(p.running))
	for id := range p.running {
		running[id] = true
	}
	return running, p.o.Workers
}

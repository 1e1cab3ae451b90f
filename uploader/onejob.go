package uploader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// OneShot tells the caller of PublishOne how its job goes, as `splatd
// publish` prints it; a nil field is not told. Calls are serialised.
type OneShot struct {
	// Stage is told each step as it starts ("sign" or "create", "upload",
	// "publish", "processing"), each retry, each move back ("resync": a v1
	// session read again or created again), each encoding and each unknown
	// task status.
	Stage func(step, detail string)
	// Progress receives the upload's bytes sent of its size.
	Progress func(sent, size int64)

	// instant, set by tests, makes every retry due at once; waited then
	// receives the delay the retry rule asked for.
	instant bool
	waited  func(time.Duration)
}

// ErrProcessingFailed is what PublishOne's error is when the splat exists
// but its processing failed or did not end in time.
var ErrProcessingFailed = errors.New("processing failed")

// oneShotGrace is how long a one-shot's calls in flight may run once its
// context ends: nothing is resumed after it, so none is waited for.
const oneShotGrace = time.Millisecond

// oneShotPatience is the pool's patience in a one-shot: each step is given
// up after the one-shot profile's tries, and a part that fails ends its
// step at once, so that the step's tries bound it too.
func oneShotPatience() map[state.Profile]state.Patience {
	return map[state.Profile]state.Patience{
		state.ProfileJob:  state.DefaultPatience[state.ProfileOneShot],
		state.ProfilePart: {Backoff: state.DefaultBackoff, Tries: 1},
	}
}

// PublishOne publishes the file at path (an unbundled SOG folder by its
// meta.json) with the pool's own steps: one worker over a store holding
// this one job in memory, with o's settings and the one-shot patience. It
// returns the job as it ended, and an error unless it is done: the job's
// failure, a refused token or a configuration error (either would pause
// the pool), or ctx's. Its encodings and bundles go to a temporary folder
// removed before it returns; nothing of the run is kept.
func PublishOne(ctx context.Context, o PoolOptions, path string, r OneShot) (state.Job, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return state.Job{}, err
	}
	tmp, err := os.MkdirTemp("", "splatd-publish-")
	if err != nil {
		return state.Job{}, err
	}
	defer os.RemoveAll(tmp)
	if o.Now == nil {
		o.Now = time.Now
	}
	run := &oneRun{r: r, protocol: o.Protocol, tries: oneShotPatience()[state.ProfileJob].Tries, stopped: make(chan error, 1)}
	run.store = newOneStore(path, fi, o.Now, r.instant, run.committed)
	o.Store, o.Workers, o.Timing.Patience = run.store, 1, oneShotPatience()
	o.OnUncertain, o.Timing.Grace, o.Timing.ProbeAPI = UncertainRepublish, oneShotGrace, 0
	o.WorkDir, o.After, o.Peers, o.Observer = tmp, nil, nil, nil
	p, err := NewPool(o)
	if err != nil {
		return state.Job{}, err
	}
	run.store.released = func() { run.released(p) }
	return run.wait(ctx, p)
}

// oneRun is one PublishOne: its store and what it tells the caller.
type oneRun struct {
	r        OneShot
	protocol string
	tries    int
	store    *oneStore
	stopped  chan error // a pause that nothing in a one-shot ends

	mu   sync.Mutex // serialises r's calls
	sent int64      // the last progress told
}

// wait runs p until the job is final, a pause stops it or ctx ends.
func (run *oneRun) wait(ctx context.Context, p *Pool) (state.Job, error) {
	pctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(pctx) }()
	stopProgress := run.watchProgress(p)
	var err error
	select {
	case <-run.store.done:
	case err = <-run.stopped:
	case err = <-ran:
		ran <- err
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	if rerr := <-ran; err == nil && rerr != nil {
		err = rerr
	}
	stopProgress()
	j := run.store.job()
	if err != nil {
		return j, err
	}
	return j, jobError(j)
}

// released sees the job given back unfinished: a token or configuration
// pause would hold it for ever, so the run stops with the pause's error.
func (run *oneRun) released(p *Pool) {
	err := p.Paused()
	if err == nil {
		err, _, _ = p.ConfigError()
	}
	if err != nil {
		select {
		case run.stopped <- err:
		default:
		}
	}
}

// jobError is a final job's outcome as an error: nil when it is done.
func jobError(j state.Job) error {
	switch {
	case j.Stage == state.Done:
		return nil
	case j.Stage == state.Held:
		return fmt.Errorf("the publish outcome is unknown (%s): check the account's splats before publishing it again", j.LastError)
	case j.Stage == state.Failed && j.SplatID != "":
		return &processingError{reason: j.FailReason}
	case j.Stage == state.Failed:
		return errors.New(j.FailReason)
	}
	return fmt.Errorf("job ended in stage %s", j.Stage)
}

// processingError is a failed job whose splat exists; it is
// ErrProcessingFailed, in the job's own reason.
type processingError struct{ reason string }

func (e *processingError) Error() string        { return e.reason }
func (e *processingError) Is(target error) bool { return target == ErrProcessingFailed }

// committed tells the caller what a commit of the job says: a retry, a
// step starting, a move back, an unknown status.
func (run *oneRun) committed(old, j state.Job, now time.Time) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if j.Stage == old.Stage {
		switch {
		case j.Attempts > old.Attempts:
			wait := j.NextAttempt.Sub(now)
			if run.r.waited != nil {
				run.r.waited(wait)
			}
			run.stage("retry", fmt.Sprintf("attempt %d of %d in %.1fs: %s", j.Attempts+1, run.tries, wait.Seconds(), j.LastError))
		case j.Stage == state.Processing && j.LastError != "" && j.LastError != old.LastError:
			run.stage("processing", j.LastError)
		case j.RateLimited != nil && (old.RateLimited == nil || !old.RateLimited.Until.Equal(j.RateLimited.Until)):
			run.stage("wait", fmt.Sprintf("%s rate limit (%s): the next request goes in %.1fs", j.RateLimited.Class, j.RateLimited.Reason, j.RateLimited.Until.Sub(now).Seconds()))
		}
		return
	}
	if old.Stage == state.Signed && j.Stage == state.Uploaded && run.r.Progress != nil {
		run.r.Progress(j.UploadSize(), j.UploadSize())
	}
	v1 := j.Protocol == state.ProtocolV1 || j.Protocol == "" && run.protocol == ProtocolV1
	back := slices.Index(state.Stages, j.Stage) < slices.Index(state.Stages, old.Stage) && !j.Stage.Final()
	detail := ""
	switch {
	case back && v1:
		run.stage("resync", j.LastError)
	case back:
		detail = j.LastError
	case j.Stage == state.Ready && j.Encoded != nil:
		run.stage("encode", fmt.Sprintf("encoded as %s, %s (publish.encode)", j.Encoded.Encoding, state.HumanSize(j.Encoded.Size)))
	case j.Stage == state.Ready && j.EncodeSkipped != "":
		run.stage("encode", "uploaded as it is: "+j.EncodeSkipped)
	case j.Stage == state.Processing:
		detail = j.TaskStatus
	}
	if step := stepOf(j.Stage, v1); step != "" {
		run.stage(step, detail)
	}
}

// stepOf names the step a job in stage starts.
func stepOf(stage state.Stage, v1 bool) string {
	switch stage {
	case state.Queued:
		return "check"
	case state.Ready:
		if v1 {
			return "create"
		}
		return "sign"
	case state.Signed:
		return "upload"
	case state.Publishing:
		return "publish"
	case state.Processing:
		return "processing"
	}
	return ""
}

func (run *oneRun) stage(step, detail string) {
	if run.r.Stage != nil {
		run.r.Stage(step, detail)
	}
}

// watchProgress tells the caller the upload's progress (Pool.Progress) as
// it goes, until the returned func is called.
func (run *oneRun) watchProgress(p *Pool) func() {
	if run.r.Progress == nil {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if pr, ok := p.Progress()[oneJobID]; ok {
				run.mu.Lock()
				if pr.Sent != run.sent {
					run.sent = pr.Sent
					run.r.Progress(pr.Sent, pr.Size)
				}
				run.mu.Unlock()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// oneJobID is the id of a one-shot's job.
const oneJobID = 1

// oneStore is a Store of one job in memory: a one-shot's.
type oneStore struct {
	now       func() time.Time
	instant   bool                                  // every job due at once (tests)
	committed func(old, j state.Job, now time.Time) // told each commit, outside mu
	released  func()                                // told each release of an unfinished job, outside mu
	done      chan struct{}                         // closed when the job is finalized

	mu      sync.Mutex
	j       state.Job
	claimed bool
}

// newOneStore holds a job queued for the file at path as fi describes it.
// Its generation is drawn at random: a v1 one-shot's session key is its own
// run's (a second run makes a new splat), found again only within the run.
func newOneStore(path string, fi os.FileInfo, now func() time.Time, instant bool, committed func(old, j state.Job, now time.Time)) *oneStore {
	at := now()
	return &oneStore{now: now, instant: instant, committed: committed, released: func() {}, done: make(chan struct{}), j: state.Job{
		V: state.JobVersion, ID: oneJobID,
		File:        state.File{Path: path, Size: fi.Size(), ModTime: fi.ModTime()},
		Publication: state.Publication{Generation: 1 + rand.IntN(1<<30)},
		Stage:       state.Queued, NextAttempt: at, CreatedAt: at, UpdatedAt: at, StageSince: at,
	}}
}

func (s *oneStore) job() state.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.j
}

func (s *oneStore) Claim(now time.Time) (state.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed || s.j.Stage.Final() || !s.instant && s.j.NextAttempt.After(now) {
		return state.Job{}, false, nil
	}
	s.claimed = true
	return s.j, true, nil
}

func (s *oneStore) NextDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed || s.j.Stage.Final() {
		return time.Time{}, false
	}
	if s.instant {
		return s.now(), true
	}
	return s.j.NextAttempt, true
}

func (s *oneStore) Release(uint64) {
	s.mu.Lock()
	s.claimed = false
	final := s.j.Stage.Final()
	s.mu.Unlock()
	if !final {
		s.released()
	}
}

// Commit checks the move as queue.Store does (the stage expected, the
// transition table) and stamps it.
func (s *oneStore) Commit(j state.Job, from state.Stage) (state.Job, error) {
	s.mu.Lock()
	old := s.j
	if old.Stage != from {
		s.mu.Unlock()
		return state.Job{}, fmt.Errorf("commit job %d as %s: stored stage is %s: %w", j.ID, j.Stage, old.Stage, state.ErrStale)
	}
	if !state.CanMove(from, j.Stage) || from.Final() {
		s.mu.Unlock()
		return state.Job{}, &state.TransitionError{ID: j.ID, From: from, To: j.Stage}
	}
	now := s.now()
	j.UpdatedAt = now
	if j.Stage != from && !j.StageSince.After(old.StageSince) {
		j.StageSince = now
	}
	s.j = j
	s.mu.Unlock()
	s.committed(old, j, now)
	return j, nil
}

func (s *oneStore) Unfinalized() ([]state.Job, error) { return nil, nil }

func (s *oneStore) MarkFinalized(uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.j.Finalized {
		s.j.Finalized = true
		close(s.done)
	}
	return nil
}

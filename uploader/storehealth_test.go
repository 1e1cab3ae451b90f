package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// fullDiskStore refuses every commit while full, as bbolt does on a full
// disk when its free pages do not hold the write (with alternate, every
// other one: the others fit), and answers claims (a read), except
// claimFails claims after the first refused commit.
type fullDiskStore struct {
	*queue.Store
	alternate  bool
	full       atomic.Bool
	commits    atomic.Int32
	refused    atomic.Int32 // commits refused
	claimFails atomic.Int32
	answered   atomic.Bool // a claim was answered after a failed one
	failedOne  atomic.Bool
}

func (s *fullDiskStore) Commit(j state.Job, from state.Stage) (state.Job, error) {
	n := s.commits.Add(1)
	if s.full.Load() && (!s.alternate || n%2 == 1) {
		s.refused.Add(1)
		return state.Job{}, errors.New("write splatd.db: no space left on device")
	}
	return s.Store.Commit(j, from)
}

func (s *fullDiskStore) Claim(now time.Time) (state.Job, bool, error) {
	if s.refused.Load() > 0 && s.claimFails.Add(-1) >= 0 {
		s.failedOne.Store(true)
		return state.Job{}, false, errors.New("read splatd.db: input/output error")
	}
	j, ok, err := s.Store.Claim(now)
	if err == nil && s.failedOne.Load() {
		s.answered.Store(true)
	}
	return j, ok, err
}

// TestWorkerStoreRecoversOnlyWhenAJobAdvances: on a full disk a claim is
// answered while the job's commit keeps failing. That is no recovery (no
// "works again" line, no rescan, still not ready); the commit that goes
// through once space is back is, once.
func TestWorkerStoreRecoversOnlyWhenAJobAdvances(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	path := e.writePLY("full.ply", 30)
	e.enqueue(path)
	fs := &fullDiskStore{Store: e.store}
	fs.full.Store(true)
	fs.claimFails.Store(1)
	o := e.options(2) // one worker holds the job, the other claims
	o.Store = fs
	var logs lockedBuffer
	o.Logger = zerolog.New(&logs)
	var recoveries atomic.Int32
	o.Observer = onRecovered{f: func() { recoveries.Add(1) }}
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	e.waitFor("a refused commit", func() bool { return fs.refused.Load() > 0 })
	p.Wake() // the idle worker claims: once refused, then answered
	e.waitFor("a claim answered after a failed one", fs.answered.Load)
	after := fs.refused.Load()
	e.waitFor("more refused commits", func() bool { return fs.refused.Load() >= after+2 })
	if n := recoveries.Load(); n != 0 {
		t.Errorf("%d recoveries while every commit fails, want 0", n)
	}
	if n := strings.Count(logs.String(), "job store works again"); n != 0 {
		t.Errorf("%d 'works again' lines while every commit fails, want 0", n)
	}
	if p.StoreError() == nil {
		t.Error("StoreError is nil while every commit fails")
	}

	fs.full.Store(false) // space is back
	e.waitFor("the job done", func() bool { return e.unfinished() == 0 })
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := recoveries.Load(); n != 1 {
		t.Errorf("%d recoveries, want 1", n)
	}
	if n := strings.Count(logs.String(), "job store works again"); n != 1 {
		t.Errorf("%d 'works again' lines, want 1", n)
	}
	if err := p.StoreError(); err != nil {
		t.Errorf("StoreError after recovery = %v", err)
	}
	e.checkOnce(path)
}

// TestWorkerStorePatienceGrowsOnAFullDisk: on a full disk where every
// other commit fits in bbolt's free pages, each commit that goes through
// is a recovery, and the next one fails: the store patience keeps growing
// across them, so the failure lines, the recoveries and their rescans come
// ever less often instead of at the first wait's pace.
func TestWorkerStorePatienceGrowsOnAFullDisk(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	path := e.writePLY("alternate.ply", 30)
	e.enqueue(path)
	fs := &fullDiskStore{Store: e.store, alternate: true}
	fs.full.Store(true)
	o := e.options(1)
	// A cap far above the test's run: no recovery is old enough to start over.
	o.Timing.Patience[state.ProfileStore] = state.Patience{Backoff: state.Backoff{Base: time.Millisecond, Cap: time.Minute, Jitter: state.NoJitter}}
	o.Store = fs
	var logs lockedBuffer
	o.Logger = zerolog.New(&logs)
	var recoveries atomic.Int32
	o.Observer = onRecovered{f: func() { recoveries.Add(1) }}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	var waits []float64
	for _, l := range strings.Split(logs.String(), "\n") {
		var line struct {
			Message string  `json:"message"`
			Retry   float64 `json:"retry_in_s"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && strings.HasPrefix(line.Message, "job store failed") {
			waits = append(waits, line.Retry)
		}
	}
	if len(waits) < 4 {
		t.Fatalf("%d refused commits, want at least 4", len(waits))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] != 2*waits[i-1] {
			t.Errorf("store waits %v: each should double the one before", waits)
			break
		}
	}
	if n := strings.Count(logs.String(), "job store works again"); n != int(recoveries.Load()) || n != len(waits) {
		t.Errorf("%d 'works again' lines, %d recoveries for %d refused commits; want one each", n, recoveries.Load(), len(waits))
	}
	e.checkOnce(path)
}

package uploader

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestProgressRateAndETA: the rate is measured over the recent window
// with the pool's clock, follows a change of pace, falls to 0 while
// nothing is sent, and gives the ETA of the rest.
func TestProgressRateAndETA(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &Pool{o: PoolOptions{Now: func() time.Time { return now }}, progress: map[uint64]*progressEntry{}}
	const size = 100 << 20
	sent := int64(0)
	step := func(d time.Duration, bytes int64) {
		for range int(d / (100 * time.Millisecond)) {
			now = now.Add(100 * time.Millisecond)
			sent += bytes / int64(d/(100*time.Millisecond))
			p.setProgress(7, &Progress{Path: "/x.ply", Sent: sent, Size: size})
		}
	}
	p.setProgress(7, &Progress{Path: "/x.ply", Size: size})
	start := now
	step(10*time.Second, 10<<20) // 1 MiB/s
	pr := p.Progress()[7]
	if pr.Rate < 0.95*(1<<20) || pr.Rate > 1.05*(1<<20) {
		t.Errorf("rate at 1 MiB/s = %.0f B/s", pr.Rate)
	}
	if want := time.Duration(float64(size-sent) / pr.Rate * float64(time.Second)); pr.ETA != want || pr.ETA < 80*time.Second {
		t.Errorf("ETA = %v, want %v (90 MiB at 1 MiB/s)", pr.ETA, want)
	}
	if !pr.Started.Equal(start) || pr.Sent != sent {
		t.Errorf("progress %+v: want started %v, sent %d", pr, start, sent)
	}
	step(10*time.Second, 40<<20) // 4 MiB/s: the window forgets the old pace
	if pr := p.Progress()[7]; pr.Rate < 3.8*(1<<20) || pr.Rate > 4.2*(1<<20) {
		t.Errorf("rate after the change to 4 MiB/s = %.0f B/s", pr.Rate)
	}
	now = now.Add(time.Minute) // stalled: nothing sent
	if pr := p.Progress()[7]; pr.Rate != 0 || pr.ETA != 0 {
		t.Errorf("stalled upload: rate %.0f, ETA %v; want 0, 0 (unknown)", pr.Rate, pr.ETA)
	}
	p.setProgress(7, nil)
	if _, ok := p.Progress()[7]; ok {
		t.Error("ended upload still listed")
	}
}

// TestCheckMeterRateAndETA: a check's meter counts the bytes written to it
// at once (an atomic counter, read by CheckProgress), samples the rate with
// the pool's clock at most every rateSample, gives the ETA of the rest as
// an upload's, and its entry is gone once stopped.
func TestCheckMeterRateAndETA(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &Pool{o: PoolOptions{Now: func() time.Time { return now }}, checks: map[uint64]*progressEntry{}}
	const size = 100 << 20
	m := p.startCheck(state.Job{ID: 7, File: state.File{Path: "/x.ply"}}, CheckHashing, size)
	chunk := make([]byte, 1<<20)
	for range 100 { // 10 s of 100 KiB every 100 ms: about 1 MiB/s
		now = now.Add(100 * time.Millisecond)
		if _, err := m.Write(chunk[:100<<10]); err != nil {
			t.Fatal(err)
		}
	}
	pr := p.CheckProgress()[7]
	if pr.Step != CheckHashing || pr.Path != "/x.ply" || pr.Size != size || pr.Sent != 100*100<<10 {
		t.Errorf("progress %+v: want hashing /x.ply, %d of %d bytes", pr, 100*100<<10, size)
	}
	if pr.Rate < 0.95*(1<<20) || pr.Rate > 1.05*(1<<20) {
		t.Errorf("rate at 1 MiB/s = %.0f B/s", pr.Rate)
	}
	if want := time.Duration(float64(size-pr.Sent) / pr.Rate * float64(time.Second)); pr.ETA != want {
		t.Errorf("ETA = %v, want %v", pr.ETA, want)
	}
	// Between two samples the bytes count at once; the rate waits for the
	// next sample.
	if _, err := m.Write(chunk); err != nil {
		t.Fatal(err)
	}
	if got := p.CheckProgress()[7].Sent; got != 100*100<<10+1<<20 {
		t.Errorf("sent %d right after a write, want %d", got, 100*100<<10+1<<20)
	}
	if _, ok := p.Progress()[7]; ok {
		t.Error("a check is listed as an upload")
	}
	m.stop()
	if _, ok := p.CheckProgress()[7]; ok {
		t.Error("ended check still listed")
	}
}

// TestCheckEncodingThenCompressing: an encoding shows its read of the PLY,
// then, once the encoder has read it (TranscodeTo calls back; a PLY with
// data after its splats is not read to its end), that it compresses: it
// no longer counts bytes, and "encoding" at a standstill read as stuck.
func TestCheckEncodingThenCompressing(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &Pool{o: PoolOptions{Now: func() time.Time { return now }}, checks: map[uint64]*progressEntry{}}
	m := p.startCheck(state.Job{ID: 7, File: state.File{Path: "/x.ply"}}, CheckEncoding, 10)
	if _, err := m.Write(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if pr := p.CheckProgress()[7]; pr.Step != CheckEncoding || pr.Sent != 8 {
		t.Errorf("mid-read: %+v, want encoding, 8 of 10", pr)
	}
	m.compressing() // no time passed: shown at once all the same
	if pr := p.CheckProgress()[7]; pr.Step != CheckCompressing || pr.Sent != 8 || pr.Size != 10 {
		t.Errorf("read done: %+v, want compressing, 8 of 10", pr)
	}
	m.stop()
}

// TestCheckProgressWhileHashing: while a worker hashes a job's file (held
// midway by the test's hook, after its first MiB), CheckProgress reports it
// hashing, with the bytes hashed so far and the file's size, and Progress
// (uploads) does not; once the check is over, the entry is gone. The same
// for an unbundled SOG folder's bundle while it is built.
func TestCheckProgressWhileHashing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ step, point string }{
		{CheckHashing, "check:hashing"},
		{CheckBundling, "check:bundling"},
	} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			e := newWorkerEnv(t, apisim.Options{})
			o := e.options(1)
			var path string
			var size int64
			if tc.step == CheckHashing {
				path = e.writePLY("big.ply", 16000) // about 4 MB: four reads of 1 MiB
				e.enqueue(path)
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				size = fi.Size()
			} else {
				o.WorkDir = e.stateDir
				path = e.enqueueFolder("folder", e.files, 1<<20) // five images of 1 MiB
			}
			reached, release := make(chan state.Job), make(chan struct{})
			var once sync.Once
			o.workerHook = func(point string, j state.Job) error {
				if point == tc.point {
					once.Do(func() {
						reached <- j
						<-release
					})
				}
				return nil
			}
			p, err := NewPool(o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- p.Run(ctx) }()
			var j state.Job
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
		wait:
			for {
				select {
				case j = <-reached:
					break wait
				case err := <-errc:
					t.Fatalf("pool ended before the %s: %v", tc.step, err)
				case <-tick.C:
					if e.jobs()[0].Stage != state.Queued {
						t.Fatalf("the check ended (job %s) and never reported its %s", e.jobs()[0].Stage, tc.step)
					}
				}
			}
			pr, ok := p.CheckProgress()[j.ID]
			if tc.step == CheckBundling {
				size = pr.Size // sized from the folder's stat: checked below against the bundle
			}
			if !ok || pr.Step != tc.step || pr.Path != path || pr.Sent <= 0 || pr.Sent >= size || size < 5<<20 && tc.step == CheckBundling {
				t.Errorf("check progress midway: %+v (listed %v), want %s of %s, 0 < sent < %d", pr, ok, tc.step, path, size)
			}
			if _, up := p.Progress()[j.ID]; up {
				t.Error("the check is listed as an upload")
			}
			if st := e.jobs()[0].Stage; st != state.Queued {
				t.Errorf("stage %s while %s, want queued", st, tc.step)
			}
			close(release)
			e.waitFor("the job to be done", func() bool { return e.jobs()[0].Stage == state.Done })
			if len(p.CheckProgress()) != 0 {
				t.Errorf("after the check: %+v still listed", p.CheckProgress())
			}
			if got := e.jobs()[0].Size; tc.step == CheckBundling && got != size {
				t.Errorf("bundling showed a total of %d bytes, the bundle is %d", size, got)
			}
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

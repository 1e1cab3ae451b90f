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

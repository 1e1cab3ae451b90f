package uploader

import (
	"context"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestWorkerAbortCutsUpload: Abort of a job whose PUT storage is stalling
// cuts the PUT at once (the client's timeout is an hour), commits nothing
// and leaves the job as the operator left it (canceled). Storage then
// reads on as fast as it can: the PUT it sees is cut short, never stored.
func TestWorkerAbortCutsUpload(t *testing.T) {
	t.Parallel()
	stalled, release := make(chan struct{}, 1), make(chan struct{})
	e := newWorkerEnv(t, apisim.Options{
		StorageBandwidth: 64 << 10,
		Sleep: func(ctx context.Context, _ time.Duration) error {
			select {
			case stalled <- struct{}{}:
			default:
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	path := e.writePLY("big.ply", 80000) // about 20 MB: more than the socket buffers hold
	e.enqueue(path)
	o := e.options(1)
	client, err := api.NewClient(api.ClientOptions{BaseURL: e.sim.URL(), Token: e.sim.Token(), RootCAs: e.sim.CertPool(), Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	o.Client = client
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	<-stalled
	job := e.jobs()[0]
	if _, err := e.store.Cancel(job.ID); err != nil {
		t.Fatal(err)
	}
	if !p.Abort(job.ID) {
		t.Fatal("Abort found no worker holding the job")
	}
	e.waitFor("the worker to let go of the PUT", func() bool {
		_, uploading := p.Progress()[job.ID]
		return !uploading
	})
	close(release)
	e.waitFor("storage to end the PUT", func() bool { return e.sim.Stats().Total(apisim.RouteStoragePut) == 1 })
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	st := e.sim.Stats()
	if st.Uploads != 0 || st.Count(apisim.RouteStoragePut, 200) != 0 || e.jobs()[0].Stage != state.Canceled {
		t.Errorf("after Abort: uploads %d, storage answers %v, job %s; want the PUT cut and the job canceled", st.Uploads, st.Requests[apisim.RouteStoragePut], e.jobs()[0].Stage)
	}
	if p.Abort(job.ID) {
		t.Error("Abort of a job no worker holds reported a stop")
	}
}

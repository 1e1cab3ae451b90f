package v1

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/fleet"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step/steptest"
)

type v1Env struct {
	sim  *apisim.Server
	pool *steptest.Pool
	p    *Protocol
	t    *pace.Caller
}

// newV1Env runs the v1 steps alone on a simulator whose parts are 1 MiB,
// with two part PUTs in flight.
func newV1Env(t *testing.T) *v1Env {
	t.Helper()
	sim, c := steptest.Sim(t, apisim.Options{PartSize: 1 << 20})
	e := &v1Env{sim: sim, pool: &steptest.Pool{}}
	view := fleet.New(fleet.Options{V1: true, Now: time.Now, PollInterval: time.Millisecond, Log: zerolog.Nop()})
	e.p = New(steptest.Env(c, e.pool), view, 2)
	e.t = c.Pacer().Caller(1, time.Second)
	return e
}

// TestStepsReadyToDone: a file of three parts goes from ready to done with
// one create, one PUT a part and one complete, and its job records each
// part's ETag and the session's key.
func TestStepsReadyToDone(t *testing.T) {
	e := newV1Env(t)
	j := steptest.ReadyJob(t, 5<<19) // 2.5 MiB: three parts
	done, seen, err := steptest.Run(t, e.p, e.t, j, state.Done)
	if err != nil {
		t.Fatal(err)
	}
	want := []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing}
	for i, s := range want {
		if i >= len(seen) || seen[i] != s {
			t.Fatalf("stages %v; want %v first", seen, want)
		}
	}
	st := e.sim.Stats()
	if st.Total(apisim.RouteV1CreateUpload) != 1 || st.Total(apisim.RoutePartPut) != 3 || st.Total(apisim.RouteV1Complete) != 1 {
		t.Errorf("%d creates, %d part PUTs, %d completes; want 1, 3, 1",
			st.Total(apisim.RouteV1CreateUpload), st.Total(apisim.RoutePartPut), st.Total(apisim.RouteV1Complete))
	}
	if done.V1 == nil || len(done.V1.ETags) != 3 || done.V1.Key != sessionKey(j.SHA256, 0, 1) || done.SplatID == "" {
		t.Errorf("done job's session %+v, splat %q: want 3 ETags under key %s and a splat id", done.V1, done.SplatID, sessionKey(j.SHA256, 0, 1))
	}
	if e.pool.Sent() != j.Size {
		t.Errorf("progress reported %d of %d bytes", e.pool.Sent(), j.Size)
	}
}

// TestCanceledSessionIsReplaced: a session the server canceled before its
// parts went up is replaced by a new one under the next attempt's key, and
// the job still publishes once.
func TestCanceledSessionIsReplaced(t *testing.T) {
	e := newV1Env(t)
	j := steptest.ReadyJob(t, 1<<20)
	signed, _, err := steptest.Run(t, e.p, e.t, j, state.Signed)
	if err != nil {
		t.Fatal(err)
	}
	if !e.sim.CancelUpload(signed.V1.ID) {
		t.Fatalf("the simulator has no session %s", signed.V1.ID)
	}
	next, err := e.p.Step(context.Background(), e.t, signed)
	if err != nil {
		t.Fatal(err)
	}
	if next.Stage != state.Ready || next.V1 == nil || next.V1.Attempt != 2 || next.V1.Key != sessionKey(j.SHA256, 0, 2) {
		t.Fatalf("after the cancel: stage %s, session %+v; want ready, attempt 2 under its own key", next.Stage, next.V1)
	}
	done, _, err := steptest.Run(t, e.p, e.t, next, state.Done)
	if err != nil {
		t.Fatal(err)
	}
	st := e.sim.Stats()
	if st.Total(apisim.RouteV1CreateUpload) != 2 || st.Total(apisim.RouteV1Complete) != 1 || done.SplatID == "" {
		t.Errorf("%d creates, %d completes, splat %q; want 2, 1 and a splat", st.Total(apisim.RouteV1CreateUpload), st.Total(apisim.RouteV1Complete), done.SplatID)
	}
}

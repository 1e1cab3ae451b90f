package legacy

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step/steptest"
)

type legacyEnv struct {
	sim  *apisim.Server
	pool *steptest.Pool
	hold bool
	p    *Protocol
	t    *pace.Caller
}

func newLegacyEnv(t *testing.T) *legacyEnv {
	t.Helper()
	sim, c := steptest.Sim(t, apisim.Options{})
	e := &legacyEnv{sim: sim, pool: &steptest.Pool{}}
	e.p = New(steptest.Env(c, e.pool), func() bool { return e.hold })
	e.t = c.Pacer().Caller(1, time.Second)
	return e
}

func (e *legacyEnv) run(t *testing.T, j state.Job, until state.Stage) (state.Job, []state.Stage, error) {
	t.Helper()
	return steptest.Run(t, e.p, e.t, j, until)
}

func readyJob(t *testing.T) state.Job { return steptest.ReadyJob(t, 0) }

// TestStepsReadyToDone: the steps take a job from ready to done through
// each legacy stage once, with one request of each route.
func TestStepsReadyToDone(t *testing.T) {
	e := newLegacyEnv(t)
	j, seen, err := e.run(t, readyJob(t), state.Done)
	if err != nil {
		t.Fatal(err)
	}
	want := []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing}
	if len(seen) < len(want)+1 {
		t.Fatalf("stages %v; want %v then processing polls and done", seen, want)
	}
	for i, s := range want {
		if seen[i] != s {
			t.Fatalf("stages %v; want %v first", seen, want)
		}
	}
	if j.SplatID == "" || j.ViewerURL == "" || j.PublishedAt == nil || j.CompletedAt == nil || j.Publishes != 1 {
		t.Errorf("done job %+v: want its splat id, viewer URL, published_at, completed_at and one publish", j)
	}
	st := e.sim.Stats()
	if st.Total(apisim.RouteSignedURL) != 1 || st.Total(apisim.RoutePublish) != 1 || st.Total(apisim.RouteStoragePut) != 1 {
		t.Errorf("requests: %d signs, %d publishes, %d PUTs; want one each",
			st.Total(apisim.RouteSignedURL), st.Total(apisim.RoutePublish), st.Total(apisim.RouteStoragePut))
	}
	if e.pool.Sent() != j.Size {
		t.Errorf("progress reported %d of %d bytes", e.pool.Sent(), j.Size)
	}
}

// TestUncertainPublishFollowsOnUncertain: a job whose publish may have
// reached the API is held for an operator under on_uncertain hold, and
// published again (once) under republish.
func TestUncertainPublishFollowsOnUncertain(t *testing.T) {
	for _, hold := range []bool{true, false} {
		e := newLegacyEnv(t)
		e.hold = hold
		j, _, err := e.run(t, readyJob(t), state.Publishing)
		if err != nil {
			t.Fatal(err)
		}
		j.Uncertain = true
		next, err := e.p.Step(context.Background(), e.t, j)
		if err != nil {
			t.Fatal(err)
		}
		publishes := e.sim.Stats().Total(apisim.RoutePublish)
		switch {
		case hold && (next.Stage != state.Held || publishes != 0 || !strings.Contains(next.FailReason, "splatd retry 1")):
			t.Errorf("hold: stage %s, %d publishes, reason %q; want held, none, and the retry command", next.Stage, publishes, next.FailReason)
		case !hold && (next.Stage != state.Processing || publishes != 1 || next.Uncertain):
			t.Errorf("republish: stage %s, %d publishes, uncertain %v; want processing after one publish, certain", next.Stage, publishes, next.Uncertain)
		}
	}
}

// TestPublishRefusedGoesBackToUploaded: a 429 on publish creates nothing,
// so the job goes back to uploaded, not uncertain; a 500 may have created
// the splat, so the next attempt is uncertain.
func TestPublishRefusedGoesBackToUploaded(t *testing.T) {
	for _, tc := range []struct {
		status    int
		stage     state.Stage
		uncertain bool
	}{{429, state.Uploaded, false}, {500, state.Publishing, true}} {
		e := newLegacyEnv(t)
		j, _, err := e.run(t, readyJob(t), state.Publishing)
		if err != nil {
			t.Fatal(err)
		}
		e.sim.SetFaults(apisim.Faults{Errors: map[string]int{apisim.RoutePublish: 1}, ErrorStatus: tc.status})
		next, err := e.p.Step(context.Background(), e.t, j)
		if err == nil || state.HTTPStatus(err) != tc.status {
			t.Fatalf("%d: error %v; want the server's %d", tc.status, err, tc.status)
		}
		if next.Stage != tc.stage || next.Uncertain != tc.uncertain {
			t.Errorf("%d: stage %s, uncertain %v; want %s, %v", tc.status, next.Stage, next.Uncertain, tc.stage, tc.uncertain)
		}
	}
}

// TestChangedFileIsNotPublished: a file that changed after its upload goes
// back to be hashed again at the intent, before any publish.
func TestChangedFileIsNotPublished(t *testing.T) {
	e := newLegacyEnv(t)
	j, _, err := e.run(t, readyJob(t), state.Uploaded)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j.Path, []byte("ply\nchanged"), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := e.p.Step(context.Background(), e.t, j)
	if err != nil {
		t.Fatal(err)
	}
	if next.Stage != state.Queued || len(e.pool.Changes()) != 1 || e.sim.Stats().Total(apisim.RoutePublish) != 0 {
		t.Errorf("stage %s, changed %q, %d publishes; want queued, one change, no publish", next.Stage, e.pool.Changes(), e.sim.Stats().Total(apisim.RoutePublish))
	}
}

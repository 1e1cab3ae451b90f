package legacy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step"
)

// fakePool is the pool as a step sees it, over one plain file.
type fakePool struct {
	changed []string // why each Changed was called
	sent    int64    // the last Report
}

func (p *fakePool) CheckName(j state.Job) (fs.FileInfo, error) { return os.Lstat(j.Path) }
func (p *fakePool) UploadFile(j state.Job) (*step.File, fs.FileInfo, error) {
	f, err := os.Open(j.Path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !step.IsRecorded(fi, j) {
		f.Close()
		return nil, fi, nil
	}
	return &step.File{F: f, Info: fi, Want: j.SHA256, Size: j.Size}, nil, nil
}
func (p *fakePool) Changed(j state.Job, fi fs.FileInfo, why string) (state.Job, error) {
	p.changed = append(p.changed, why)
	if err := j.Reset(state.ResetChanged, time.Now()); err != nil {
		return j, err
	}
	j.Size, j.ModTime = fi.Size(), fi.ModTime()
	return j, nil
}
func (p *fakePool) Commit(_ context.Context, j state.Job, _ state.Stage) (state.Job, error) {
	return j, nil
}
func (p *fakePool) Hook(string, state.Job) error { return nil }
func (p *fakePool) UntilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
func (p *fakePool) Report(_ state.Job, sent, _ int64) { p.sent = sent }
func (p *fakePool) EndReport(uint64)                  {}

type legacyEnv struct {
	sim  *apisim.Server
	pool *fakePool
	env  *step.Env
	hold bool
	p    *Protocol
	t    *pace.Caller
}

func newLegacyEnv(t *testing.T) *legacyEnv {
	t.Helper()
	sim, err := apisim.New(apisim.Options{ProcessingDelay: time.Millisecond,
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	c, err := api.NewClient(api.ClientOptions{BaseURL: sim.URL(), Token: sim.Token(), RootCAs: sim.CertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &legacyEnv{sim: sim, pool: &fakePool{}}
	e.env = &step.Env{Pool: e.pool, Client: c, Log: zerolog.Nop(), Now: time.Now, Policy: state.Policy{},
		Timing: step.Timing{URLMaxAge: time.Hour, PollInterval: time.Millisecond, PollMaxInterval: time.Millisecond, PollTimeout: time.Minute}}
	e.p = New(e.env, func() bool { return e.hold })
	e.t = c.Pacer().Caller(1, time.Second)
	return e
}

// readyJob writes a small PLY and returns its job in stage ready.
func readyJob(t *testing.T) state.Job {
	t.Helper()
	var b strings.Builder
	b.WriteString("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n")
	b.WriteString(strings.Repeat("\x00", 12))
	path := filepath.Join(t.TempDir(), "scene.ply")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return state.Job{ID: 1, Stage: state.Ready, File: state.File{Path: path, Size: fi.Size(), ModTime: fi.ModTime(),
		SHA256: hex.EncodeToString(sum[:]), Kind: "ply"}, Params: state.PublishParams{Title: "scene"}}
}

// run steps j until it reaches stage `until` or a step fails.
func (e *legacyEnv) run(t *testing.T, j state.Job, until state.Stage) (state.Job, []state.Stage, error) {
	t.Helper()
	var seen []state.Stage
	for range 50 {
		if j.Stage == until {
			return j, seen, nil
		}
		next, err := e.p.Step(context.Background(), e.t, j)
		if err != nil {
			return next, seen, err
		}
		j = next
		seen = append(seen, j.Stage)
	}
	t.Fatalf("job still in %s after 50 steps", j.Stage)
	return j, seen, nil
}

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
	if e.pool.sent != j.Size {
		t.Errorf("progress reported %d of %d bytes", e.pool.sent, j.Size)
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
	if next.Stage != state.Queued || len(e.pool.changed) != 1 || e.sim.Stats().Total(apisim.RoutePublish) != 0 {
		t.Errorf("stage %s, changed %q, %d publishes; want queued, one change, no publish", next.Stage, e.pool.changed, e.sim.Stats().Total(apisim.RoutePublish))
	}
}

package uploader

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/splatfile"
)

// v1OneShot runs PublishOne under v1 on a file of about parts simulator
// parts, 3 parts at a time, every retry due at once.
func v1OneShot(t *testing.T, e *workerEnv, parts int, progress func(sent, size int64)) (state.Job, *instantRun, error) {
	t.Helper()
	path := e.writeParts("a.ply", parts)
	ir := &instantRun{}
	j, err := ir.publish(e.client, path, v1OneShotOptions(), OneShot{Progress: progress})
	return j, ir, err
}

// v1OneShotOptions are the pool options of a v1 one-shot under test.
func v1OneShotOptions() PoolOptions {
	return PoolOptions{Protocol: ProtocolV1, ParallelParts: 3, Timing: Timing{Poll: PollOptions{Interval: time.Millisecond, Timeout: time.Minute}}}
}

// TestPublishOneV1Once: a v1 one-shot sends every part once through one
// session, completes it once and returns the splat's viewer link; a create
// and a complete whose answers are lost (the server acted, then 502) are
// sent again under the same key and session, and make no second splat.
func TestPublishOneV1Once(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{ProcessingDelay: -1, Faults: apisim.Faults{UncertainCreates: 1, UncertainCompletes: 1}})
	var last, size int64
	j, ir, err := v1OneShot(t, e, 5, func(sent, sz int64) { last, size = sent, sz })
	retries := ir.retries
	if err != nil || j.SplatID == "" || !strings.Contains(j.ViewerURL, "/scene/") {
		t.Fatalf("PublishOne v1 = %+v, %v (retries %q); want a splat with its viewer link", j, err, retries)
	}
	st := e.sim.Stats()
	if st.Creates != 1 || st.CreateReplays != 1 || st.V1Splats != 1 || st.Completes != 1 || st.CompleteReplays != 1 || st.PartPuts != 5 || st.Uploads != 0 {
		t.Errorf("simulator: %d creates (%d replayed), %d splats, %d completes (%d replayed), %d part PUTs, %d legacy uploads; want 1 (1), 1, 1 (1), 5, 0",
			st.Creates, st.CreateReplays, st.V1Splats, st.Completes, st.CompleteReplays, st.PartPuts, st.Uploads)
	}
	if len(retries) != 2 {
		t.Errorf("retries %q, want the create's and the complete's", retries)
	}
	if last != size || size == 0 {
		t.Errorf("progress ended at %d of %d, want all of it", last, size)
	}
}

// TestPublishOneV1GivesUp: the one-shot patience bounds a v1 one-shot. A
// server that keeps failing the complete, or storage that keeps failing
// one part, ends the command with the error after the profile's tries
// (each delay recorded, not waited), and no splat is made.
func TestPublishOneV1GivesUp(t *testing.T) {
	t.Parallel()
	tries := state.DefaultPatience[state.ProfileOneShot].Tries
	for _, c := range []struct {
		name   string
		faults apisim.Faults
		route  string
	}{
		{"complete 503", apisim.Faults{ErrorRate: map[string]float64{apisim.RouteV1Complete: 1}, ErrorStatus: 503}, apisim.RouteV1Complete},
		{"create 500", apisim.Faults{ErrorRate: map[string]float64{apisim.RouteV1CreateUpload: 1}}, apisim.RouteV1CreateUpload},
		{"part 503", apisim.Faults{PartErrorRate: 1}, apisim.RoutePartPut},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newV1Env(t, apisim.Options{ProcessingDelay: -1, Faults: c.faults})
			j, ir, err := v1OneShot(t, e, 1, nil)
			retries := ir.retries
			if err == nil || j.Stage != state.Failed || j.LastStatus < 500 || !strings.Contains(err.Error(), "gave up after 5 tries") {
				t.Fatalf("PublishOne v1 against a failing %s = %s (status %d), %v; want its 5xx, given up after 5 tries", c.route, j.Stage, j.LastStatus, err)
			}
			st := e.sim.Stats()
			sent := 0
			for _, n := range st.Requests[c.route] {
				sent += n
			}
			if sent != tries || len(retries) != tries-1 || st.V1Splats != 0 {
				t.Errorf("%d %s requests, retries %q, %d splats; want %d requests, %d retries, no splat", sent, c.route, retries, st.V1Splats, tries, tries-1)
			}
			if len(ir.waited) != tries-1 {
				t.Errorf("waited %v; want %d waits of the one-shot backoff", ir.waited, tries-1)
			}
			for _, d := range ir.waited {
				if d < time.Second {
					t.Errorf("waited %v; want the one-shot backoff (at least 1 s)", d)
				}
			}
		})
	}
}

// TestPublishOneFolder: under either protocol an unbundled SOG folder is
// sent as its bundle, FOLDER.sog (PrepareOneShot's, as `splatd publish`
// passes it), and neither the bundle nor the run's temporary folder
// outlives the run. The legacy one-shot once refused folders, which the
// daemon publishes under legacy too.
func TestPublishOneFolder(t *testing.T) {
	for _, protocol := range []string{ProtocolLegacy, ProtocolV1} {
		t.Run(protocol, func(t *testing.T) { // not parallel: TMPDIR is the test's
			e := newWorkerEnv(t, apisim.Options{ProcessingDelay: -1})
			if protocol == ProtocolV1 {
				e = newV1Env(t, apisim.Options{ProcessingDelay: -1})
			}
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			dir := filepath.Join(t.TempDir(), "lobby")
			if err := splatfile.WriteSOGFolder(dir, 300); err != nil {
				t.Fatal(err)
			}
			meta := filepath.Join(dir, splatfile.SOGMeta)
			if got := content.PublishedAs(meta); got != dir+".sog" {
				t.Errorf("PublishedAs(%s) = %s, want %s.sog", meta, got, dir)
			}
			src, err := content.PrepareOneShot(t.Context(), meta, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			j, err := new(instantRun).publish(e.client, src.Path, PoolOptions{Protocol: protocol, Files: SidecarFiles{Publish: state.PublishParams{Title: "lobby"}}}, OneShot{})
			src.Close()
			splats := e.sim.Splats()
			if err != nil || j.ViewerURL == "" || len(splats) != 1 || splats[0].Format != "sog" {
				t.Fatalf("PublishOne of a SOG folder = %+v, %v, splats %+v; want one sog splat", j, err, splats)
			}
			if protocol == ProtocolLegacy && !strings.HasSuffix(splats[0].Key, "lobby.sog") {
				t.Errorf("stored as %s, want the bundle's name lobby.sog", splats[0].Key)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("left in TMPDIR: %v", left)
			}
		})
	}
}

// TestPublishOneV1ProcessingFailed: a splat whose processing fails is an
// ErrProcessingFailed that still names the splat; it is not retried.
func TestPublishOneV1ProcessingFailed(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{ProcessingDelay: -1, Faults: apisim.Faults{ProcessingFailRate: 1}})
	j, ir, err := v1OneShot(t, e, 2, nil)
	if !errors.Is(err, ErrProcessingFailed) || j.SplatID == "" || len(ir.retries) != 0 || e.sim.Stats().Completes != 1 {
		t.Errorf("PublishOne v1 with failing processing = %+v, %v, retries %q, %d completes; want ErrProcessingFailed naming the splat, one complete",
			j, err, ir.retries, e.sim.Stats().Completes)
	}
}

// TestPublishOneV1Resyncs: a v1 one-shot whose session goes away under it
// reads it again, as the daemon's jobs do, and still makes one splat: a
// session that expires (404) or is canceled (409) before the complete, or
// expires before its first part URL, is created again under a new key and
// every part is sent again.
func TestPublishOneV1Resyncs(t *testing.T) {
	t.Parallel()
	const parts = 4
	cases := []struct {
		name    string
		at      string // the stage at which the session is taken away
		expire  bool   // else canceled
		status  string // the refusal the one-shot reports as it resyncs
		wantPut int
	}{
		{"expired before complete", "publish", true, "404", 2 * parts},
		{"canceled before complete", "publish", false, "409", 2 * parts},
		{"expired before the parts", "upload", true, "404", parts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newV1Env(t, apisim.Options{ProcessingDelay: -1})
			path := e.writeParts("a.ply", parts)
			var resyncs []string
			done := false
			j, err := new(instantRun).publish(e.client, path, v1OneShotOptions(), OneShot{
				Stage: func(step, detail string) {
					switch {
					case step == "resync":
						resyncs = append(resyncs, detail)
					case step == c.at && !done:
						done = true
						ss := e.sim.Sessions()
						id := ss[len(ss)-1].ID
						if c.expire && !e.sim.ExpireUpload(id) || !c.expire && !e.sim.CancelUpload(id) {
							t.Errorf("session %s could not be taken away", id)
						}
					}
				},
			})
			if err != nil || j.ViewerURL == "" {
				t.Fatalf("PublishOne = %+v, %v; want the splat after a resync (%q)", j, err, resyncs)
			}
			st := e.sim.Stats()
			if st.V1Splats != 1 || st.Creates != 2 || st.PartPuts != c.wantPut {
				t.Errorf("simulator: %d splats, %d creates, %d part PUTs; want 1, 2, %d", st.V1Splats, st.Creates, st.PartPuts, c.wantPut)
			}
			if len(resyncs) == 0 || !strings.Contains(strings.Join(resyncs, " "), c.status) {
				t.Errorf("resync stages %q, want one naming the server's %s", resyncs, c.status)
			}
		})
	}
}

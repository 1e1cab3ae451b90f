package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// v1OneShot runs PublishFile under v1 on a file of about parts simulator
// parts, on the instant clock clk, 3 parts at a time.
func v1OneShot(t *testing.T, e *workerEnv, parts int, clk *instantClock, progress func(sent, size int64)) (Published, []string, error) {
	t.Helper()
	path := e.writeParts("a.ply", parts)
	var mu sync.Mutex
	var retries []string
	sp, err := PublishFile(context.Background(), e.client, path, state.PublishParams{Title: "a"}, OneShotOptions{
		Protocol: ProtocolV1, ParallelParts: 3,
		PollInterval: time.Millisecond, PollTimeout: time.Minute,
		After:    clk.after,
		Progress: progress,
		Stage: func(step, detail string) {
			if step == "retry" {
				mu.Lock()
				retries = append(retries, detail)
				mu.Unlock()
			}
		},
	})
	return sp, retries, err
}

// TestPublishFileV1Once: a v1 one-shot sends every part once through one
// session, completes it once and returns the splat's viewer link; a create
// and a complete whose answers are lost (the server acted, then 502) are
// sent again under the same key and session, and make no second splat.
func TestPublishFileV1Once(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{ProcessingDelay: -1, Faults: apisim.Faults{UncertainCreates: 1, UncertainCompletes: 1}})
	clk := &instantClock{}
	var last, size int64
	sp, retries, err := v1OneShot(t, e, 5, clk, func(sent, sz int64) { last, size = sent, sz })
	if err != nil || sp.ID == "" || !strings.Contains(sp.URL, "/scene/") {
		t.Fatalf("PublishFile v1 = %+v, %v (retries %q); want a splat with its viewer link", sp, err, retries)
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

// TestPublishFileV1GivesUp: the one-shot patience bounds a v1 one-shot. A
// server that keeps failing the complete, or storage that keeps failing
// one part, ends the command with the error after the profile's tries
// (each wait on the instant clock), and no splat is made.
func TestPublishFileV1GivesUp(t *testing.T) {
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
			clk := &instantClock{}
			_, retries, err := v1OneShot(t, e, 1, clk, nil)
			var ae *api.APIError
			if !errors.As(err, &ae) || ae.Status < 500 || !strings.Contains(err.Error(), "gave up after 5 tries") {
				t.Fatalf("PublishFile v1 against a failing %s = %v; want its 5xx, given up after 5 tries", c.route, err)
			}
			st := e.sim.Stats()
			sent := 0
			for _, n := range st.Requests[c.route] {
				sent += n
			}
			if sent != tries || len(retries) != tries-1 || st.V1Splats != 0 {
				t.Errorf("%d %s requests, retries %q, %d splats; want %d requests, %d retries, no splat", sent, c.route, retries, st.V1Splats, tries, tries-1)
			}
			clk.mu.Lock()
			defer clk.mu.Unlock()
			if len(clk.waited) != tries-1 {
				t.Errorf("waited %v; want %d waits of the one-shot backoff", clk.waited, tries-1)
			}
		})
	}
}

// TestPublishFileFolder: under either protocol an unbundled SOG folder
// (its meta.json) is sent as its bundle, FOLDER.sog, and the bundle does
// not outlive the run. The legacy one-shot once refused folders, which the
// daemon publishes under legacy too.
func TestPublishFileFolder(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{ProtocolLegacy, ProtocolV1} {
		t.Run(protocol, func(t *testing.T) { // not parallel: the bundles-left check is global
			e := newWorkerEnv(t, apisim.Options{ProcessingDelay: -1})
			if protocol == ProtocolV1 {
				e = newV1Env(t, apisim.Options{ProcessingDelay: -1})
			}
			dir := filepath.Join(t.TempDir(), "lobby")
			if err := splatfile.WriteSOGFolder(dir, 300); err != nil {
				t.Fatal(err)
			}
			meta := filepath.Join(dir, splatfile.SOGMeta)
			if got := PublishedAs(meta); got != dir+".sog" {
				t.Errorf("PublishedAs(%s) = %s, want %s.sog", meta, got, dir)
			}
			sp, err := PublishFile(context.Background(), e.client, meta, state.PublishParams{Title: "lobby"}, OneShotOptions{
				Protocol: protocol, PollInterval: time.Millisecond, After: (&instantClock{}).after,
			})
			splats := e.sim.Splats()
			if err != nil || sp.URL == "" || len(splats) != 1 || splats[0].Format != "sog" {
				t.Fatalf("PublishFile of a SOG folder = %+v, %v, splats %+v; want one sog splat", sp, err, splats)
			}
			if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "splatd-publish-*", "lobby.sog")); len(left) != 0 {
				t.Errorf("bundles left: %v", left)
			}
		})
	}
}

// TestPublishFileV1ProcessingFailed: a splat whose processing fails is an
// ErrProcessingFailed that still names the splat; it is not retried.
func TestPublishFileV1ProcessingFailed(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{ProcessingDelay: -1, Faults: apisim.Faults{ProcessingFailRate: 1}})
	sp, retries, err := v1OneShot(t, e, 2, &instantClock{}, nil)
	if !errors.Is(err, ErrProcessingFailed) || sp.ID == "" || len(retries) != 0 || e.sim.Stats().Completes != 1 {
		t.Errorf("PublishFile v1 with failing processing = %+v, %v, retries %q, %d completes; want ErrProcessingFailed naming the splat, one complete",
			sp, err, retries, e.sim.Stats().Completes)
	}
}

// TestPublishFileV1Resyncs: a v1 one-shot whose session goes away under it
// reads it again, as the daemon's jobs do, and still makes one splat: a
// session that expires (404) or is canceled (409) before the complete, or
// expires before its first part URL, is created again under a new key and
// every part is sent again.
func TestPublishFileV1Resyncs(t *testing.T) {
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
			sp, err := PublishFile(context.Background(), e.client, path, state.PublishParams{Title: "a"}, OneShotOptions{
				Protocol: ProtocolV1, ParallelParts: 3, PollInterval: time.Millisecond, PollTimeout: time.Minute,
				After: (&instantClock{}).after,
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
			if err != nil || sp.URL == "" {
				t.Fatalf("PublishFile = %+v, %v; want the splat after a resync (%q)", sp, err, resyncs)
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

// TestPrepareOneShotBundlesAFolderOnce: a folder within its bounds is
// bundled into a temporary folder of its own ($TMPDIR), as FOLDER.sog,
// and SHA256 is that file's (hashed as it was written); Close removes it.
// A build whose context ends part-way returns the context's error and
// leaves nothing; a folder over the bounds is refused before it is built.
func TestPrepareOneShotBundlesAFolderOnce(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // not parallel
	dir := filepath.Join(t.TempDir(), "lobby")
	if err := splatfile.WriteSparseSOGFolder(dir, 100, 4<<20); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, splatfile.SOGMeta)
	src, err := PrepareOneShot(t.Context(), meta, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src.Path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != src.SHA256 || filepath.Base(src.Path) != "lobby.sog" || int64(len(b)) != src.Info.Size {
		t.Errorf("bundle %s of %d bytes, sha256 %x; PrepareOneShot said %s, %d bytes", src.Path, len(b), sum, src.SHA256, src.Info.Size)
	}
	src.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left after Close: %v", left)
	}
	ctx := newCancelOnPoll(t, 10)
	if _, err := PrepareOneShot(ctx, meta, 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("PrepareOneShot under a context that ends = %v, want the context's error", err)
	}
	if _, err := PrepareOneShot(t.Context(), meta, 0, 1<<20); err == nil || !strings.Contains(err.Error(), "not built or uploaded") {
		t.Errorf("PrepareOneShot over max_size = %v, want the bounds' reason", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left by a cancelled build or a refused folder: %v", left)
	}
}

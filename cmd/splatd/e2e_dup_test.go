package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2EDuplicateMarkedAndPublishAsks: a copy of published content is
// marked as a duplicate in `splatd jobs`, /api/jobs (the status page's
// "Latest publishes" data) and its receipt; `splatd publish` of published
// content says so and sends nothing; -force publishes it anyway.
func TestE2EDuplicateMarkedAndPublishAsks(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()
	first := filepath.Join(e.inbox, "first.ply")
	writePLY(t, first, 1000)
	waitReceipt(t, first, "done")
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(e.inbox, "copy.ply")
	if err := os.WriteFile(copyPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := waitReceipt(t, copyPath, "duplicate"); r.Splat.URL == "" {
		t.Errorf("duplicate's receipt: %+v", r)
	}

	code, out, _ := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "DUPLICATE of job 1") {
		t.Errorf("jobs does not mark the duplicate:\n%s", out)
	}
	_, body := httpGet(t, "http://"+addr+"/api/jobs?stage=done")
	var list struct {
		Jobs []struct {
			Path        string `json:"path"`
			DuplicateOf uint64 `json:"duplicate_of"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	marked := false
	for _, j := range list.Jobs {
		if j.Path == copyPath && j.DuplicateOf == 1 {
			marked = true
		}
		if j.Path == first && j.DuplicateOf != 0 {
			t.Errorf("the original is marked a duplicate: %s", body)
		}
	}
	if !marked {
		t.Errorf("/api/jobs?stage=done does not mark the duplicate: %s", body)
	}

	// publish: the receipt (and the state) show the content published.
	before := sim.Stats().SignedURLs
	code, out, errOut := runCLI(t, nil, "publish", "-config", e.cfgPath, first)
	if code != 0 || !strings.Contains(errOut, "already published") || !strings.Contains(errOut, "-force") || !strings.Contains(out, first+"\t") {
		t.Errorf("publish of published content: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A copy outside the watch folders, without a receipt: the state knows it.
	outside := filepath.Join(t.TempDir(), "elsewhere.ply")
	if err := os.WriteFile(outside, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, nil, "publish", "-config", e.cfgPath, outside)
	if code != 0 || !strings.Contains(errOut, "the daemon's job 1") {
		t.Errorf("publish of a copy the state knows: exit %d, stderr %q", code, errOut)
	}
	if n := sim.Stats().SignedURLs - before; n != 0 {
		t.Errorf("publish without -force asked for %d signed URLs, want 0", n)
	}
	code, out, errOut = runCLI(t, nil, "publish", "-force", "-config", e.cfgPath, outside)
	if code != 0 || strings.Contains(errOut, "already published") || !strings.Contains(out, "/view") {
		t.Errorf("publish -force: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := sim.Stats().SignedURLs - before; n != 1 {
		t.Errorf("publish -force asked for %d signed URLs, want 1", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2EFixedFolderSettingsRequeue: files that failed on a broken folder
// .splat.yaml are queued again when it is fixed, and publish with it; a
// file that failed for another reason stays failed.
func TestE2EFixedFolderSettingsRequeue(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	client := filepath.Join(e.inbox, "client")
	if err := os.MkdirAll(client, 0o755); err != nil {
		t.Fatal(err)
	}
	settings := filepath.Join(client, ".splat.yaml")
	if err := os.WriteFile(settings, []byte("title: [not closed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	a, b := filepath.Join(client, "a.ply"), filepath.Join(client, "b.ply")
	writePLY(t, a, 1000)
	writePLY(t, b, 1100)
	broken := filepath.Join(e.inbox, "broken.ply")
	if err := os.WriteFile(broken, []byte("not a splat"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{a, b, broken} {
		waitReceipt(t, f, "failed")
	}
	// Fixed as an editor saves: a new file renamed over the old one.
	tmp := filepath.Join(client, ".splat.yaml.tmp")
	if err := os.WriteFile(tmp, []byte("title: \"Client {{.Stem}}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, settings); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{a, b} {
		r := waitReceipt(t, f, "done")
		if want := "Client " + strings.TrimSuffix(filepath.Base(f), ".ply"); r.Title != want {
			t.Errorf("%s published as %q, want %q", f, r.Title, want)
		}
	}
	if r, _ := readReceipt(t, broken); r.Status != "failed" {
		t.Errorf("the invalid file's receipt after the fix: %+v", r)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2EResumeLogAfterKill: after kill -9 during a v1 upload with parts
// stored, the restart logs "resuming N jobs" and the part the upload
// resumes from.
func TestE2EResumeLogAfterKill(t *testing.T) {
	t.Parallel()
	var simp atomic.Pointer[apisim.Server]
	// Storage stalls once two parts are stored: the upload is mid-way when
	// the daemon is killed. The stall is the bandwidth cap's Sleep, which
	// the simulator calls only for a pause of 2 ms or more: the cap (1 MiB/s)
	// is low enough that every part's reads ask for pauses, and the Sleep
	// skips them (returns at once) until the stall begins. (With a cap too
	// high to ever pause, the stall never came and the test only passed when
	// its poll caught a 0.1 s upload mid-way.)
	stall := func(ctx context.Context, _ time.Duration) error {
		if s := simp.Load(); s != nil && s.Stats().PartPuts >= 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	sim := newE2ESim(t, apisim.Options{StorageBandwidth: 1 << 20, Sleep: stall, PartSize: 1 << 20})
	simp.Store(sim)
	e := newE2EEnv(t, sim, e2eConfig{protocol: "v1", extra: "upload: {parallel_parts: 1}\n"})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	big := filepath.Join(e.inbox, "big.ply")
	size := writeBigPLY(t, big, 6<<20)
	parts := float64((size + 1<<20 - 1) >> 20)
	waitFor(t, "two parts stored and a third under way", func() bool {
		jobs, _ := adminJobs(t, e.stateDir)
		return sim.Stats().PartPuts >= 2 && len(jobs) == 1 && strings.HasPrefix(jobs[0].Activity, "uploading ")
	})
	d.kill()
	if n := sim.Stats().PartPuts; float64(n) >= parts {
		t.Fatalf("all %d parts were stored before the kill: the stall did not hold the upload", n)
	}

	d2 := startDaemon(t, e.cfgPath)
	l := d2.waitLogLine("resuming 1 jobs left unfinished by the last run")
	if l["jobs"] != float64(1) {
		t.Errorf("resume line: %v", l)
	}
	var part, held map[string]any
	waitFor(t, "the job's resume line and the server's answer", func() bool {
		for _, l := range d2.logLines() {
			m, _ := l["message"].(string)
			switch {
			case strings.Contains(m, "parts were sent before; the server is asked"):
				part = l
			case strings.Contains(m, "upload session holds") && strings.Contains(m, "parts on the server"):
				held = l
			}
		}
		return part != nil && held != nil
	})
	// The kill may come between storage taking part 2 and the daemon
	// committing its ETag: at least part 1 was committed, and the server
	// holds at least as many as were committed.
	sent, _ := part["parts_committed"].(float64)
	if sent < 1 || part["parts"] != parts || part["path"] != big {
		t.Errorf("resume line of the job: %v; want at least part 1 committed of %v", part, parts)
	}
	if holds, _ := held["server_holds"].(float64); holds < sent || held["parts"] != parts {
		t.Errorf("the server's answer: %v; want at least the %v committed parts of %v", held, sent, parts)
	}
	d2.kill()
}

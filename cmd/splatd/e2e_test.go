package main

// End-to-end tests: the splatd binary, built once, run as a process against
// the API simulator running in the test (loopback TLS). They check what an
// operator relies on: every finished file published once with a receipt,
// restarts and crashes that neither lose nor duplicate work, clear errors,
// the admin CLI, metrics and systemd readiness. Run them with
//
//	go test -race -count=1 -run E2E ./cmd/splatd/

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// TestE2EIngest drops files into the watched folders in the ways capture
// software writes them (the demo's kinds, and the watcher issue's: renamed
// in from outside, a whole folder moved in, a folder watched by polling, a
// symlink, a copy of a published file) while the daemon runs, and checks
// the receipts, the server side (one publish per content, nothing for the
// invalid file, no Authorization on storage), the log (no token, no
// signed-URL query, even at debug level) and the metrics.
func TestE2EIngest(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{logLevel: "debug", pollRoot: true})
	d := startDaemon(t, e.cfgPath)
	metricsAddr := d.waitStarted()

	plain := filepath.Join(e.inbox, "lobby.ply")
	slow := filepath.Join(e.inbox, "statue.compressed.ply")
	sog := filepath.Join(e.inbox, "garden.sog")
	broken := filepath.Join(e.inbox, "broken.ply")
	deep := filepath.Join(e.inbox, "a", "b", "c", "deep.ply")
	movedIn := filepath.Join(e.inbox, "moved.ply")
	batch := []string{filepath.Join(e.inbox, "batch", "b1.ply"), filepath.Join(e.inbox, "batch", "sub", "b2.sog")}
	polled := filepath.Join(e.pollInbox, "share", "remote.ply")
	link := filepath.Join(e.inbox, "link.ply")
	copyOf := filepath.Join(e.pollInbox, "lobby-copy.ply") // another watched folder
	outside := filepath.Join(e.dir, "outside")

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // written in pieces, each pause longer than settle
		defer wg.Done()
		writeSlowlyE2E(t, slow, 6, 400*time.Millisecond)
	}()
	writePLY(t, plain, 3000)
	// SOG under a hidden temporary name, then renamed into place.
	tmp := filepath.Join(e.inbox, ".garden.sog.part")
	writeFileWith(t, tmp, func(w io.Writer) error { return splatfile.WriteSOG(w, 3000) })
	if err := os.Rename(tmp, sog); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("this is a text file someone named .ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePLY(t, deep, 2000) // MkdirAll a/b/c, then the file at once
	// Written outside the tree, then renamed in: a file and a whole folder.
	writePLY(t, filepath.Join(outside, "moved.ply"), 2500)
	if err := os.Rename(filepath.Join(outside, "moved.ply"), movedIn); err != nil {
		t.Fatal(err)
	}
	writePLY(t, filepath.Join(outside, "batch", "b1.ply"), 2600)
	writeFileWith(t, filepath.Join(outside, "batch", "sub", "b2.sog"), func(w io.Writer) error { return splatfile.WriteSOG(w, 2700) })
	if err := os.Rename(filepath.Join(outside, "batch"), filepath.Join(e.inbox, "batch")); err != nil {
		t.Fatal(err)
	}
	writePLY(t, polled, 2800) // found by polling, in a new subfolder
	// A symlink to a file outside: not followed (follow_symlinks is off).
	target := filepath.Join(outside, "target.ply")
	writePLY(t, target, 2900)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	valid := append([]string{plain, slow, sog, deep, movedIn, polled}, batch...)
	viewerURL := regexp.MustCompile(`^` + regexp.QuoteMeta(sim.URL()) + `/view\?id=[a-z0-9]+$`)
	hashes := map[string]string{}
	for _, f := range valid {
		r := waitReceipt(t, f, "done", "failed", "duplicate")
		if r.Status != "done" {
			t.Errorf("%s: receipt status %q (%s), want done", filepath.Base(f), r.Status, r.Message)
			continue
		}
		if !viewerURL.MatchString(r.Splat.URL) {
			t.Errorf("%s: viewer URL %q, want %s/view?id=...", filepath.Base(f), r.Splat.URL, sim.URL())
		}
		if r.Splat.ID == "" || r.PublishedAt == nil || r.CompletedAt == nil {
			t.Errorf("%s: receipt lacks splat id or times: %+v", filepath.Base(f), r)
		}
		sum := fileSHA256(t, f)
		if r.SHA256 != sum {
			t.Errorf("%s: receipt sha256 %s, file's is %s", filepath.Base(f), r.SHA256, sum)
		}
		fi, _ := os.Stat(f)
		if r.Size != fi.Size() || r.File != f {
			t.Errorf("%s: receipt says file %s size %d, want %s size %d", filepath.Base(f), r.File, r.Size, f, fi.Size())
		}
		hashes[f] = sum
	}

	rb := waitReceipt(t, broken, "done", "failed", "duplicate")
	if rb.Status != "failed" || !strings.Contains(rb.Message, "not a PLY, SOG or SPZ") {
		t.Errorf("broken.ply: receipt status %q message %q, want failed with the reason", rb.Status, rb.Message)
	}
	if rb.Splat.ID != "" || rb.Splat.URL != "" {
		t.Errorf("broken.ply: receipt names a splat: %+v", rb.Splat)
	}

	// The same content under another name, after the original is done: it
	// is recorded, never published again, and its receipt points at the
	// original's splat.
	orig, _ := readReceipt(t, plain)
	data, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyOf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rc := waitReceipt(t, copyOf, "done", "failed", "duplicate")
	if rc.Status != "duplicate" || rc.Splat.URL != orig.Splat.URL {
		t.Errorf("copy of lobby.ply: receipt status %q url %q, want duplicate of %q", rc.Status, rc.Splat.URL, orig.Splat.URL)
	}

	if _, ok := readReceipt(t, link); ok {
		t.Errorf("the symlink got a receipt: symlinks must not be followed by default")
	}
	st := sim.Stats()
	pubs := sim.PublishesByHash()
	if _, ok := pubs[fileSHA256(t, target)]; ok {
		t.Errorf("the symlink's target was published")
	}
	for _, f := range valid {
		if n := pubs[hashes[f]]; n != 1 {
			t.Errorf("%s: published %d times on the server, want exactly 1", filepath.Base(f), n)
		}
	}
	if len(pubs) != len(valid) {
		t.Errorf("server saw publishes of %d contents, want %d: %v", len(pubs), len(valid), pubs)
	}
	if _, ok := pubs[fileSHA256(t, broken)]; ok {
		t.Errorf("broken.ply was published")
	}
	if st.Uploads != len(valid) {
		t.Errorf("storage got %d uploads, want %d (the invalid file and the copy must not be uploaded)", st.Uploads, len(valid))
	}
	if st.StorageAuthHeaders != 0 {
		t.Errorf("%d storage requests carried an Authorization header", st.StorageAuthHeaders)
	}
	if st.RateLimited != 0 {
		t.Errorf("%d answers were 429", st.RateLimited)
	}

	// Metrics of this run: the finished jobs, the publish calls, build_info.
	code, body := httpGet(t, "http://"+metricsAddr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	if v, ok := promSample(body, "splatd_jobs_finished_total", map[string]string{"result": "done"}); !ok || v < float64(len(valid)) {
		t.Errorf("splatd_jobs_finished_total{result=done} = %v (present %v), want >= %d", v, ok, len(valid))
	}
	if v, ok := promSample(body, "splatd_jobs_finished_total", map[string]string{"result": "failed"}); !ok || v < 1 {
		t.Errorf("splatd_jobs_finished_total{result=failed} = %v (present %v), want >= 1", v, ok)
	}
	if v, ok := promSample(body, "splatd_api_requests_total", map[string]string{"route": "publish", "code": "201"}); !ok || v < float64(len(valid)) {
		t.Errorf("splatd_api_requests_total{route=publish,code=201} = %v (present %v), want >= %d", v, ok, len(valid))
	}
	if v, ok := promSample(body, "splatd_build_info", map[string]string{"version": e2eVersion}); !ok || v != 1 {
		t.Errorf("splatd_build_info{version=%q} = %v (present %v), want 1", e2eVersion, v, ok)
	}
	if v, ok := promSample(body, "splatd_upload_bytes_total", nil); !ok || v <= 0 {
		t.Errorf("splatd_upload_bytes_total = %v (present %v), want > 0", v, ok)
	}
	if code, body := httpGet(t, "http://"+metricsAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz: HTTP %d %s, want 200", code, body)
	}

	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d after SIGTERM, want 0", code)
	}
	assertNoSecrets(t, d.log(), sim.Token())
}

// writeSlowlyE2E writes a compressed PLY in pieces with pauses, as a slow
// copy does; the daemon must not publish it before the last piece.
func writeSlowlyE2E(t *testing.T, path string, pieces int, pause time.Duration) {
	var buf strings.Builder
	if err := splatfile.WriteCompressedPLY(&buf, 20000); err != nil {
		t.Error(err)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	data := buf.String()
	step := (len(data) + pieces - 1) / pieces
	for i := 0; i < len(data); i += step {
		if i > 0 {
			time.Sleep(pause)
		}
		if _, err := f.WriteString(data[i:min(i+step, len(data))]); err != nil {
			t.Error(err)
			return
		}
	}
}

// TestE2ERestartMidIngest kills the daemon (SIGKILL) once some but not all
// of ten files are done and checks that the next start publishes every one
// of them, each once. One file is still being written at the crash, so
// "not all" holds by construction.
func TestE2ERestartMidIngest(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{ProcessingDelay: 1500 * time.Millisecond})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	var files []string
	for i := range 9 {
		p := filepath.Join(e.inbox, fmt.Sprintf("scan-%02d.ply", i))
		writePLY(t, p, 400+i)
		files = append(files, p)
	}
	// The tenth is half written when the daemon dies.
	last := filepath.Join(e.inbox, "scan-09.ply")
	var full strings.Builder
	if err := splatfile.WritePLY(&full, 409); err != nil {
		t.Fatal(err)
	}
	half := full.Len() / 2
	if err := os.WriteFile(last, []byte(full.String()[:half]), 0o644); err != nil {
		t.Fatal(err)
	}
	files = append(files, last)

	waitFor(t, "a first receipt", func() bool {
		for _, f := range files {
			if _, ok := readReceipt(t, f); ok {
				return true
			}
		}
		return false
	})
	d.kill()
	done := 0
	for _, f := range files {
		if r, ok := readReceipt(t, f); ok && r.Status == "done" {
			done++
		}
	}
	t.Logf("%d of %d files done at the crash", done, len(files))
	if done == 0 || done == len(files) {
		t.Fatalf("%d of %d done at the crash: the test did not crash mid-ingest", done, len(files))
	}

	// Finish the tenth file while no daemon runs, then start again.
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(full.String()[half:]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	for _, f := range files {
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" {
			t.Errorf("%s: status %q (%s) after the restart, want done", filepath.Base(f), r.Status, r.Message)
		}
	}
	if code := d2.stop(); code != 0 {
		t.Errorf("second run exited %d, want 0", code)
	}

	// Exactly once per file. The one exception the design allows: a crash
	// between the publish call and its commit leaves the outcome unknown,
	// and publish.on_uncertain: republish (the default) publishes again;
	// the daemon must then say so in its log.
	pubs := sim.PublishesByHash()
	for _, f := range files {
		n := pubs[fileSHA256(t, f)]
		switch {
		case n == 1:
		case n == 2 && strings.Contains(grepLines(d2.log(), "publish outcome unknown"), f):
			t.Logf("%s: published twice after a crash during its publish call (documented: on_uncertain: republish)", filepath.Base(f))
		default:
			t.Errorf("%s: published %d times, want exactly 1", filepath.Base(f), n)
		}
	}
	if len(pubs) != len(files) {
		t.Errorf("server saw %d contents published, want %d", len(pubs), len(files))
	}
}

// TestE2ESigtermDuringLargeUpload stops the daemon with SIGTERM while a
// ~240 MB file is being uploaded: it must exit 0 with a clean-stop log line,
// and the next start must publish the file exactly once.
func TestE2ESigtermDuringLargeUpload(t *testing.T) {
	t.Parallel()
	// Storage hashes without storing (no 240 MB on disk). The latency makes
	// every request wait before it is read, so the upload is reliably in
	// flight when the test sees its first bytes sent.
	sim := newE2ESim(t, apisim.Options{DiscardObjects: true, Faults: apisim.Faults{Latency: 1500 * time.Millisecond}})
	e := newE2EEnv(t, sim, e2eConfig{workers: 1})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	big := filepath.Join(e.inbox, "hall.ply")
	size := writeBigPLY(t, big, 240<<20)

	var inflight e2eJob
	waitFor(t, "the upload to be in flight", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		if err != nil {
			return false
		}
		for _, j := range jobs {
			if j.File == big && strings.HasPrefix(j.Activity, "uploading ") && j.Sent > 0 && j.Sent < size {
				inflight = j
				return true
			}
			if j.File == big && j.Stage != "queued" && j.Stage != "ready" && j.Stage != "signed" {
				t.Fatalf("job reached %s before the test saw its upload in flight", j.Stage)
			}
		}
		return false
	})
	t.Logf("SIGTERM with %d of %d bytes sent", inflight.Sent, size)
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d after SIGTERM during an upload, want 0", code)
	}
	d.waitLogLine("stopped cleanly")
	sim.SetFaults(apisim.Faults{})

	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	r := waitReceipt(t, big, "done", "failed", "duplicate")
	if r.Status != "done" {
		t.Fatalf("after the restart: status %q (%s), want done", r.Status, r.Message)
	}
	if code := d2.stop(); code != 0 {
		t.Errorf("second run exited %d, want 0", code)
	}
	if n := sim.PublishesByHash()[r.SHA256]; n != 1 || r.SHA256 == "" {
		t.Errorf("the large file was published %d times (sha256 %q), want exactly 1", n, r.SHA256)
	}
	assertNoSecrets(t, d.log()+d2.log(), sim.Token())
}

// TestE2EInvalidConfig: a bad config is a usage error (exit 2) whose
// message names the key, and nothing is started or created.
func TestE2EInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"http-base-url.yaml", []string{"api.base_url", "https"}},
		{"unknown-key.yaml", []string{"setle: unknown key", "api.tokenfile: unknown key"}},
		{"inline-token.yaml", []string{"api.token:", "token_file"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			cfg, err := filepath.Abs(filepath.Join("testdata", "e2e", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			d := startDaemonIn(t, dir, cfg)
			if code := d.waitExit(); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(d.log(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, d.log())
				}
			}
			if strings.Contains(d.log(), "secret-inline-token") {
				t.Errorf("stderr repeats the inline token")
			}
			if _, err := os.Stat(filepath.Join(dir, "never-created")); err == nil {
				t.Errorf("state_dir was created although the config is invalid")
			}
		})
	}
}

// TestE2ESecondInstance: a second `splatd run` on the same state_dir exits
// 1 with a clear message and leaves the first one working.
func TestE2ESecondInstance(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	first := startDaemon(t, e.cfgPath)
	first.waitStarted()

	second := startDaemon(t, e.cfgPath)
	if code := second.waitExit(); code != 1 {
		t.Errorf("second splatd exited %d, want 1", code)
	}
	if !strings.Contains(second.log(), "another splatd is using") || !strings.Contains(second.log(), e.stateDir) {
		t.Errorf("second splatd's stderr does not say another splatd uses %s:\n%s", e.stateDir, second.log())
	}

	// The first one still serves its admin socket and still ingests.
	p := filepath.Join(e.inbox, "after-second.ply")
	writePLY(t, p, 700)
	if r := waitReceipt(t, p, "done", "failed", "duplicate"); r.Status != "done" {
		t.Errorf("the first daemon no longer works after the second one's attempt: %q %s", r.Status, r.Message)
	}
	if _, err := adminJobs(t, e.stateDir); err != nil {
		t.Errorf("the first daemon's admin socket: %v", err)
	}
	if code := first.stop(); code != 0 {
		t.Errorf("first splatd exited %d, want 0", code)
	}
}

// TestE2EWrongToken: with a token the API refuses, the daemon pauses after
// a handful of requests, says why in its log and on /readyz, and after a
// restart with the right token publishes everything.
func TestE2EWrongToken(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	const wrong = "sim_wrong_token_0123456789abcdef"
	e.setToken(wrong)

	var files []string
	for i := range 3 {
		p := filepath.Join(e.inbox, fmt.Sprintf("take-%d.ply", i))
		writePLY(t, p, 900+i)
		files = append(files, p)
	}
	d := startDaemon(t, e.cfgPath)
	metricsAddr := d.waitStarted()
	d.waitLogLine("refused the token")

	// Over the next few seconds the daemon must stay quiet.
	time.Sleep(5 * time.Second)
	st := sim.Stats()
	total := 0
	for route := range st.Requests {
		total += st.Total(route)
	}
	if total > 5 || st.Unauthorized == 0 {
		t.Errorf("with a refused token the daemon made %d requests (%d answered 401): %v; want a handful (1..5)", total, st.Unauthorized, st.Requests)
	}
	code, body := httpGet(t, "http://"+metricsAddr+"/readyz")
	if code != 503 || !strings.Contains(body, "token") || !strings.Contains(body, e.tokenFile) {
		t.Errorf("/readyz: HTTP %d %q; want 503 saying the token from %s is refused", code, body, e.tokenFile)
	}
	if v, ok := promSample(httpGetBody(t, "http://"+metricsAddr+"/metrics"), "splatd_token_refused", nil); !ok || v != 1 {
		t.Errorf("splatd_token_refused = %v (present %v), want 1", v, ok)
	}
	for _, f := range files {
		if _, ok := readReceipt(t, f); ok {
			t.Errorf("%s got a receipt although the token is refused (jobs must wait, not fail)", filepath.Base(f))
		}
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d, want 0", code)
	}

	e.setToken(sim.Token())
	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	pubs := func() map[string]int { return sim.PublishesByHash() }
	for _, f := range files {
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" {
			t.Errorf("%s: %q (%s) after the token was fixed, want done", filepath.Base(f), r.Status, r.Message)
		}
		if n := pubs()[fileSHA256(t, f)]; n != 1 {
			t.Errorf("%s: published %d times, want 1", filepath.Base(f), n)
		}
	}
	if code := d2.stop(); code != 0 {
		t.Errorf("second run exited %d, want 0", code)
	}
	assertNoSecrets(t, d.log()+d2.log(), sim.Token(), wrong)
}

// TestE2ETokenFixedWithoutRestart: while the token is refused, replacing
// the token file is enough; the running daemon picks it up and publishes.
func TestE2ETokenFixedWithoutRestart(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	const wrong = "sim_wrong_token_fedcba9876543210"
	e.setToken(wrong)
	f := filepath.Join(e.inbox, "late-token.ply")
	writePLY(t, f, 1234)
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	d.waitLogLine("refused the token")

	e.setToken(sim.Token())
	d.waitLogLine("token changed: trying it now")
	if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" {
		t.Errorf("%s: %q (%s) after the token file was fixed, want done", filepath.Base(f), r.Status, r.Message)
	}
	if n := sim.PublishesByHash()[fileSHA256(t, f)]; n != 1 {
		t.Errorf("published %d times, want 1", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d, want 0", code)
	}
	assertNoSecrets(t, d.log(), sim.Token(), wrong)
}

func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	_, b := httpGet(t, url)
	return b
}

// TestE2EJobsAndRetry drives `splatd jobs` and `splatd retry` through the
// admin socket of a running daemon, then reads the state file directly
// with `splatd jobs` once the daemon has stopped.
func TestE2EJobsAndRetry(t *testing.T) {
	t.Parallel()
	// Every processing fails at first: the jobs end failed, to be retried.
	sim := newE2ESim(t, apisim.Options{Faults: apisim.Faults{ProcessingFailRate: 1}})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	one := filepath.Join(e.inbox, "one.ply")
	two := filepath.Join(e.inbox, "sub", "two.sog")
	writePLY(t, one, 1100)
	writeFileWith(t, two, func(w io.Writer) error { return splatfile.WriteSOG(w, 1200) })
	for _, f := range []string{one, two} {
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "failed" || !strings.Contains(r.Message, "processing failed") {
			t.Fatalf("%s: %q %q, want failed by processing", filepath.Base(f), r.Status, r.Message)
		}
	}

	jobs := cliJobs(t, e, true)
	byFile := map[string]e2eJob{}
	for _, j := range jobs {
		byFile[j.File] = j
	}
	for _, f := range []string{one, two} {
		j, ok := byFile[f]
		if !ok {
			t.Fatalf("splatd jobs -json does not list %s: %+v", f, jobs)
		}
		if j.Stage != "failed" || !strings.Contains(j.Error, "processing failed") || j.ID == 0 || j.SHA256 == "" {
			t.Errorf("%s: job %+v, want stage failed with the processing error", filepath.Base(f), j)
		}
	}
	// -state filters; a table is printed without -json.
	code, out, errOut := runCLI(t, nil, "jobs", "-config", e.cfgPath, "-state", "done")
	if code != 0 || strings.Contains(out, "one.ply") || !strings.Contains(out, "STAGE") {
		t.Errorf("jobs -state done: exit %d, stdout %q, stderr %q; want a table without the failed jobs", code, out, errOut)
	}

	sim.UpdateFaults(func(f *apisim.Faults) { f.ProcessingFailRate = 0 })
	code, out, errOut = runCLI(t, nil, "retry", "-config", e.cfgPath, fmt.Sprint(byFile[one].ID))
	if code != 0 || !strings.Contains(out, "re-queued 1 job") {
		t.Fatalf("retry %d: exit %d, stdout %q, stderr %q", byFile[one].ID, code, out, errOut)
	}
	if r := waitReceipt(t, one, "done"); !strings.Contains(r.Splat.URL, "/view?id=") {
		t.Errorf("one.ply after retry: %+v", r)
	}
	// Flags after the positional form: "retry -failed -config F".
	code, out, errOut = runCLI(t, nil, "retry", "-failed", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "re-queued 1 job") {
		t.Fatalf("retry -failed: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	waitReceipt(t, two, "done")

	// A done job retried is published again on purpose (a new generation:
	// under v1 a new Idempotency-Key); an unknown id is an error.
	publishes := sim.Stats().Publishes
	code, out, errOut = runCLI(t, nil, "retry", "-config", e.cfgPath, fmt.Sprint(byFile[one].ID))
	if code != 0 || !strings.Contains(out, "re-queued 1 job") {
		t.Errorf("retry of a done job: exit %d, stdout %q, stderr %q; want it re-queued", code, out, errOut)
	}
	waitFor(t, "the done job published again", func() bool { return sim.Stats().Publishes == publishes+1 })
	waitFor(t, "the republished job done again", func() bool {
		for _, j := range cliJobs(t, e, true) {
			if j.File == one {
				return j.Stage == "done"
			}
		}
		return false
	})
	code, _, errOut = runCLI(t, nil, "retry", "-config", e.cfgPath, "999")
	if code != 1 || !strings.Contains(errOut, "no job 999") {
		t.Errorf("retry 999: exit %d, stderr %q; want 1 and \"no job 999\"", code, errOut)
	}

	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d, want 0", code)
	}
	// No daemon: the state file is read directly, and says so.
	code, out, errOut = runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(errOut, "not running") {
		t.Errorf("jobs without a daemon: exit %d, stderr %q; want 0 and a note that splatd is not running", code, errOut)
	}
	for _, f := range []string{one, two} {
		if !regexp.MustCompile(`(?m)^\d+\s+done\s.*` + regexp.QuoteMeta(f)).MatchString(out) {
			t.Errorf("jobs without a daemon does not list %s as done:\n%s", f, out)
		}
	}
	offline := cliJobs(t, e, false)
	if len(offline) != 2 {
		t.Errorf("jobs -json without a daemon lists %d jobs, want 2: %+v", len(offline), offline)
	}
	// Each content was published twice (once when processing failed, once
	// after the retry), and one.ply once more, on purpose; never more.
	for f, want := range map[string]int{one: 3, two: 2} {
		if n := sim.PublishesByHash()[fileSHA256(t, f)]; n != want {
			t.Errorf("%s: %d publishes, want %d", filepath.Base(f), n, want)
		}
	}
}

// cliJobs runs `splatd jobs -json` and decodes it; live says whether a
// daemon is expected to answer (no "not running" note).
func cliJobs(t *testing.T, e *e2eEnv, live bool) []e2eJob {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "jobs", "-json", "-config", e.cfgPath)
	if code != 0 {
		t.Fatalf("jobs -json: exit %d, stderr %q", code, errOut)
	}
	if live == strings.Contains(errOut, "not running") {
		t.Errorf("jobs -json (daemon running: %v): stderr %q", live, errOut)
	}
	var jobs []e2eJob
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("jobs -json is not JSON: %v\n%s", err, out)
	}
	return jobs
}

// TestE2ECheckpointsAndPublish runs the one-shot API commands against the
// simulator: checkpoints (paging, limits, unknown branch) and publish.
func TestE2ECheckpointsAndPublish(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{Branches: map[string]int{"main": 123}})
	e := newE2EEnv(t, sim, e2eConfig{})

	code, out, errOut := runCLI(t, nil, "checkpoints", "-config", e.cfgPath, "main", "-all")
	if code != 0 {
		t.Fatalf("checkpoints main -all: exit %d, stderr %q", code, errOut)
	}
	want, _ := sim.Checkpoints("main")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("checkpoints: no header line:\n%s", out)
	}
	lines = lines[1:]
	if len(lines) != 123 {
		t.Errorf("checkpoints main -all printed %d lines, want 123", len(lines))
	}
	seen := map[string]bool{}
	for i, l := range lines {
		id := strings.Fields(l)[0]
		if seen[id] {
			t.Errorf("checkpoint %s printed twice", id)
		}
		seen[id] = true
		if i < len(want) && id != want[i].ID {
			t.Errorf("line %d: checkpoint %s, want %s (newest first)", i+1, id, want[i].ID)
			break
		}
	}

	code, out, errOut = runCLI(t, nil, "checkpoints", "-config", e.cfgPath, "main", "-limit", "51")
	if code != 2 || !strings.Contains(errOut, "-limit") || !strings.Contains(errOut, "50") || out != "" {
		t.Errorf("checkpoints -limit 51: exit %d, stdout %q, stderr %q; want 2 and the reason", code, out, errOut)
	}
	code, _, errOut = runCLI(t, nil, "checkpoints", "-config", e.cfgPath, "nosuchbranch")
	if code != 1 || !strings.Contains(errOut, "branch nosuchbranch not found") {
		t.Errorf("checkpoints nosuchbranch: exit %d, stderr %q; want 1 and \"branch nosuchbranch not found\"", code, errOut)
	}
	code, out, errOut = runCLI(t, nil, "checkpoints", "-json", "-limit", "5", "-config", e.cfgPath, "main")
	var cps []struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &cps) != nil || len(cps) != 5 || cps[0].ID != want[0].ID {
		t.Errorf("checkpoints -json -limit 5: exit %d, stderr %q, %d entries", code, errOut, len(cps))
	}

	good := filepath.Join(e.dir, "single.ply")
	writePLY(t, good, 1300)
	code, out, errOut = runCLI(t, nil, "publish", "-config", e.cfgPath, good)
	viewer := regexp.MustCompile(regexp.QuoteMeta(good) + `\t` + regexp.QuoteMeta(sim.URL()) + `/view\?id=[a-z0-9]+\n`)
	if code != 0 || !viewer.MatchString(out) {
		t.Errorf("publish: exit %d, stdout %q, stderr %q; want 0 and the viewer URL", code, out, errOut)
	}
	if n := sim.PublishesByHash()[fileSHA256(t, good)]; n != 1 {
		t.Errorf("publish: %d publishes of the file, want 1", n)
	}

	bad := filepath.Join(e.dir, "bad.ply")
	if err := os.WriteFile(bad, []byte("ply\nformat binary_little_endian 1.0\nelement vertex 10\nproperty float x\nproperty float y\nproperty float z\nend_header\n"+strings.Repeat("\x00", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := sim.Stats().SignedURLs
	code, _, errOut = runCLI(t, nil, "publish", "-config", e.cfgPath, bad)
	if code != 1 || !strings.Contains(errOut, "bad.ply") || !strings.Contains(errOut, "more than its header declares") {
		t.Errorf("publish of an invalid file: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
	if after := sim.Stats().SignedURLs; after != before {
		t.Errorf("publish of an invalid file asked for %d signed URLs", after-before)
	}
	assertNoSecrets(t, out+errOut, sim.Token())
}

// TestE2ESystemdNotify starts the real binary the way the unit does (issue
// 6): the token as a systemd credential, a state directory, a notify socket
// and a watchdog, and reads the sd_notify datagrams.
func TestE2ESystemdNotify(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "splatd.service"))
	if err != nil {
		t.Fatal(err)
	}
	// The credential name and the service type come from the unit itself.
	m := regexp.MustCompile(`(?m)^LoadCredential=([^:\s]+):`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("splatd.service has no LoadCredential=")
	}
	credName := string(m[1])
	if !regexp.MustCompile(`(?m)^Type=notify\s*$`).Match(unit) {
		t.Errorf("splatd.service is not Type=notify")
	}

	sim := newE2ESim(t, apisim.Options{})
	base := t.TempDir()
	credDir := filepath.Join(base, "credentials")
	stateDir := filepath.Join(base, "lib", "splatd")
	for _, d := range []string{credDir, stateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(credDir, credName), []byte(sim.Token()+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	e := newE2EEnv(t, sim, e2eConfig{noTokenFile: true, stateDir: stateDir})

	sockPath := filepath.Join(base, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	// got holds every datagram in arrival order; waitMsg finds the first
	// one with prefix at index from or later (STATUS may come before READY:
	// the order between them is not part of the protocol).
	var got []string
	waitMsg := func(prefix string, from int) int {
		t.Helper()
		deadline := time.After(e2eWait)
		for {
			for i := from; i < len(got); i++ {
				if strings.HasPrefix(got[i], prefix) {
					return i
				}
			}
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed before %q; got %q", prefix, got)
				}
				got = append(got, m)
			case <-deadline:
				t.Fatalf("no %q on the notify socket within %s; got %q", prefix, e2eWait, got)
			}
		}
	}

	d := startDaemon(t, e.cfgPath,
		"NOTIFY_SOCKET="+sockPath,
		"CREDENTIALS_DIRECTORY="+credDir,
		"STATE_DIRECTORY="+stateDir,
		"WATCHDOG_USEC=2000000",
	)
	ready := waitMsg("READY=1", 0)
	if status := got[waitMsg("STATUS=", 0)]; !strings.Contains(status, "active") || !strings.Contains(status, "done") {
		t.Errorf("STATUS line %q does not give queue counts", status)
	}
	// The watchdog is fed after READY, and again and again, not once.
	waitMsg("WATCHDOG=1", waitMsg("WATCHDOG=1", ready+1)+1)
	started := d.waitLogLine("splatd started")
	if from, _ := started["token_from"].(string); !strings.HasPrefix(from, credDir) {
		t.Errorf("token_from = %q, want the credential in %s", from, credDir)
	}

	// It works under this environment: a file is published.
	p := filepath.Join(e.inbox, "unit.ply")
	writePLY(t, p, 1500)
	if r := waitReceipt(t, p, "done", "failed", "duplicate"); r.Status != "done" {
		t.Errorf("under the unit's environment: %q %s", r.Status, r.Message)
	}
	if fi, err := os.Stat(filepath.Join(stateDir, "splatd.sock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket in the state directory: %v, mode %v; want 0600", err, fi)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopping := waitMsg("STOPPING=1", ready+1)
	if code := d.waitExit(); code != 0 {
		t.Errorf("exit code %d after the stop signal, want 0", code)
	}
	for _, m := range got[stopping+1:] {
		if m == "READY=1" {
			t.Errorf("READY=1 after STOPPING=1: %q", got)
		}
	}
	assertNoSecrets(t, d.log(), sim.Token())
}

// The tests below guard against bugs found while writing the ones above.

// TestE2EShutdownStartsNoNewCalls: after SIGTERM a worker may finish the
// call it is in (here a storage PUT), but must not start the next stage's
// call (publish, poll): a publish started late in the grace period would be
// cut at its end and become an uncertain outcome at the next start. (Found
// when Pool.runJob kept advancing its claimed job through every stage while
// draining; fixed by Pool.Drain.)
func TestE2EShutdownStartsNoNewCalls(t *testing.T) {
	t.Parallel()
	// Every request waits before it is read: the PUT is reliably in flight
	// when the test sees the job signed with bytes sent.
	sim := newE2ESim(t, apisim.Options{Faults: apisim.Faults{Latency: 1500 * time.Millisecond}})
	e := newE2EEnv(t, sim, e2eConfig{workers: 1})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	p := filepath.Join(e.inbox, "drain.ply")
	writePLY(t, p, 2100)
	waitFor(t, "the upload to be in flight", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		if err != nil {
			return false
		}
		for _, j := range jobs {
			if j.File == p && strings.HasPrefix(j.Activity, "uploading ") && j.Sent > 0 {
				return true
			}
		}
		return false
	})
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d after SIGTERM, want 0", code)
	}
	st := sim.Stats()
	if n := st.Total(apisim.RoutePublish) + st.Total(apisim.RouteGetSplat); n != 0 {
		t.Errorf("after SIGTERM the daemon started %d new API calls (publish %v, get_splat %v); "+
			"want none: only the call in flight at SIGTERM may finish", n,
			st.Requests[apisim.RoutePublish], st.Requests[apisim.RouteGetSplat])
	}

	// Whatever the first run did, the next one finishes the job once.
	sim.SetFaults(apisim.Faults{})
	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	if r := waitReceipt(t, p, "done", "failed", "held", "duplicate"); r.Status != "done" {
		t.Errorf("after the restart: %q %s, want done", r.Status, r.Message)
	}
	if n := sim.PublishesByHash()[fileSHA256(t, p)]; n != 1 {
		t.Errorf("published %d times, want 1", n)
	}
	d2.stop()
}

// pacedIngest runs a daemon (publish.on_uncertain: hold) against a
// simulator whose publish route is in a class of 4 per window, drops five
// files and returns once the fifth one's publish is delayed by the pacer:
// the first four are published at once (the window has budget) and the
// fifth waits for the window's reset, with no 429 drawn.
func pacedIngest(t *testing.T, window time.Duration) (sim *apisim.Server, e *e2eEnv, d *e2eDaemon, files []string, waiting string) {
	t.Helper()
	// The pacer sends while the window has budget: 4 publishes go at once,
	// the fifth waits for the window's reset (and, after a restart, the
	// persisted window makes the new daemon wait for it too).
	sim = newE2ESim(t, apisim.Options{
		Window:  window,
		Classes: map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict},
		Limits:  map[apisim.Class]int{apisim.ClassStrict: 4},
	})
	// Polls wait past the window: a poll of a route whose class is not
	// known yet probes, and a probe holds a slot in every known window,
	// so with the publish window spent it would hold the workers until
	// the reset (finishPaced polls at once again).
	e = newE2EEnv(t, sim, e2eConfig{pollEvery: "40s", extra: "publish: {on_uncertain: hold}\n"})
	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	for i := range 5 {
		p := filepath.Join(e.inbox, fmt.Sprintf("paced-%d.ply", i))
		writePLY(t, p, 2200+i)
		files = append(files, p)
	}
	// One job waits for its publish slot (in stage uploaded, or publishing
	// if the intent were committed before the pacer's wait) while the
	// server has received exactly the publishes of the jobs past it.
	look := func() (string, int) {
		jobs, err := adminJobs(t, e.stateDir)
		if err != nil || len(jobs) != len(files) {
			return "", 0
		}
		var in string
		past := 0
		for _, j := range jobs {
			switch j.Stage {
			case "uploaded", "publishing":
				in = j.File
			case "processing", "done":
				past++
			}
		}
		if in == "" || past+1 != len(files) || sim.Stats().Total(apisim.RoutePublish) != past {
			return "", 0
		}
		return in, past
	}
	var sent int
	waitFor(t, "a job whose publish waits for the rate limit", func() bool {
		waiting, sent = look()
		return waiting != ""
	})
	// Held, not merely slow: a publish sent into the spent window would
	// have drawn a 429 (the callers then check that nothing more is sent
	// before they kill or stop the daemon).
	if n := sim.Stats().RateLimited; n != 0 {
		t.Fatalf("the pacer let %d request(s) into a spent window (429) while %s waited; %d publishes sent", n, waiting, sent)
	}
	return sim, e, d, files, waiting
}

// finishPaced restarts the daemon and checks that every file ends done and
// published exactly once.
func finishPaced(t *testing.T, sim *apisim.Server, e *e2eEnv, files []string, why string) {
	t.Helper()
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.ReplaceAll(string(cfg), "interval: 40s", "interval: 200ms")), 0o600); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	for _, f := range files {
		r := waitReceipt(t, f, "done", "failed", "held", "duplicate")
		if r.Status != "done" {
			t.Errorf("%s: %q (%s); want done: %s", filepath.Base(f), r.Status, r.Message, why)
		}
		if n := sim.PublishesByHash()[fileSHA256(t, f)]; r.Status == "done" && n != 1 {
			t.Errorf("%s published %d times, want 1", filepath.Base(f), n)
		}
	}
	if code := d2.stop(); code != 0 {
		t.Errorf("second run exited %d, want 0", code)
	}
}

// TestE2ECrashWhilePublishWaitsForRateLimit: with publish.on_uncertain:
// hold, a job whose publish call never left the machine (it waited in the
// rate-limit pacer when the daemon died) must not be held for an operator:
// its outcome is certain, no splat was created. (Found when the stage
// publishing was committed before the pacer's wait, so that with a strict
// publish limit most queued jobs sat in publishing and any restart held
// them all; fixed by reserving the slot before the intent commit.)
func TestE2ECrashWhilePublishWaitsForRateLimit(t *testing.T) {
	t.Parallel()
	sim, e, d, files, waiting := pacedIngest(t, 30*time.Second)
	sent := sim.Stats().Total(apisim.RoutePublish)
	d.kill()
	if n := sim.Stats().Total(apisim.RoutePublish); n != sent {
		t.Fatalf("server got %d publish requests, want %d: the one of %s was never sent", n, sent, waiting)
	}
	t.Logf("killed while %s waited in the pacer (%d publishes sent)", filepath.Base(waiting), sent)
	finishPaced(t, sim, e, files, "its publish was never sent, so its outcome is not uncertain")
}

// TestE2ESigtermWhilePublishWaitsForRateLimit: SIGTERM while a job waits
// in the pacer for its publish slot. Waiting is not a call in flight: the
// daemon must stop without sending that publish (a publish admitted late
// in the grace period is cut at its end and becomes an uncertain outcome,
// held under on_uncertain: hold), exit 0, and the next start publishes it
// once. The window (30 s) would admit the publish at its reset, inside the
// 20 s shutdown grace when SIGTERM comes early in the window.
func TestE2ESigtermWhilePublishWaitsForRateLimit(t *testing.T) {
	t.Parallel()
	sim, e, d, files, waiting := pacedIngest(t, 30*time.Second)
	sent := sim.Stats().Total(apisim.RoutePublish)
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d after SIGTERM, want 0", code)
	}
	if n := sim.Stats().Total(apisim.RoutePublish); n != sent {
		t.Errorf("after SIGTERM the daemon sent %d publish call(s) it had been waiting to send (%s); "+
			"a pacer wait is not a call in flight: give up the slot and stop", n-sent, filepath.Base(waiting))
	}
	finishPaced(t, sim, e, files, "stopped while its publish waited for the rate limit")
}

// TestE2EJobsSayWhyAJobWaitsForTheRateLimit: a job whose publish the pacer
// holds back (the window spent) says so, with the class, the reason and the
// window's end: in `splatd jobs`, in its -json (rate_limit) and on the
// status page's /api/jobs (waiting). Before, it showed its stage only, and an
// operator could not tell a paced job from a stuck one.
func TestE2EJobsSayWhyAJobWaitsForTheRateLimit(t *testing.T) {
	t.Parallel()
	_, e, d, _, waiting := pacedIngest(t, 30*time.Second)
	defer d.kill()
	const want = "strict: no request left in the window, until "
	var got string
	waitFor(t, "the waiting job's rate_limit", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		for _, j := range jobs {
			if err == nil && j.File == waiting {
				got = j.RateLimit
			}
		}
		return got != ""
	})
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " UTC") {
		t.Errorf("rate_limit of %s = %q, want it to start %q and end in UTC", filepath.Base(waiting), got, want)
	}
	jobs, err := adminJobs(t, e.stateDir)
	for _, j := range jobs {
		if err == nil && j.File == waiting && (j.RateLimitUntil == nil || !strings.Contains(got, j.RateLimitUntil.UTC().Format(time.TimeOnly))) {
			t.Errorf("rate_limit_until of %s = %v, want the time %q names", filepath.Base(waiting), j.RateLimitUntil, got)
		}
	}
	code, out, stderr := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 {
		t.Fatalf("splatd jobs: exit %d: %s", code, stderr)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, filepath.Base(waiting)) {
			line = l
		}
	}
	if !strings.Contains(line, "rate limit "+want) {
		t.Errorf("splatd jobs shows the waiting job as %q, want %q in it:\n%s", line, "rate limit "+want, out)
	}
	_, body := httpGet(t, "http://"+d.waitStarted()+"/api/jobs")
	var list struct {
		Jobs []struct {
			Path     string `json:"path"`
			Activity string `json:"activity"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("/api/jobs: %v, %s", err, body)
	}
	shown := "not listed"
	for _, j := range list.Jobs {
		if j.Path == waiting {
			shown = j.Activity
		}
	}
	if !strings.HasPrefix(shown, "rate limit "+want) {
		t.Errorf("/api/jobs: activity of %s = %q, want it to start %q", filepath.Base(waiting), shown, "rate limit "+want)
	}
}

// TestE2EJobsParkedOnTheRateLimitLeaveTheWorkerFree: with one worker and
// a strict publish window of one per minute, the jobs whose publish the
// pacer holds back for the window's reset are parked in stage uploaded
// (RATE LIMIT with the time, not holding the worker), and the published
// job is polled to done meanwhile. Before, the worker sat in the pacer for
// the window: the processing job was not polled (a user saw "done" 20-58 s
// after "processing" for a 2 s processing) and due jobs said "WAITING for a
// free worker (1 of 1 busy, 1 held by the rate limit)".
func TestE2EJobsParkedOnTheRateLimitLeaveTheWorkerFree(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{
		Window:  time.Minute,
		Classes: map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict},
		Limits:  map[apisim.Class]int{apisim.ClassStrict: 1},
	})
	e := newE2EEnv(t, sim, e2eConfig{workers: 1, pollEvery: "200ms"})
	d := startDaemon(t, e.cfgPath)
	defer d.kill()
	d.waitStarted()
	var files []string
	for i := range 3 {
		p := filepath.Join(e.inbox, fmt.Sprintf("one-worker-%d.ply", i))
		writePLY(t, p, 2300+i)
		files = append(files, p)
	}
	const want = "strict: no request left in the window, until "
	var done string
	var parked []string
	waitFor(t, "one job done and two parked on the rate limit", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		done, parked = "", nil
		for _, j := range jobs {
			switch {
			case err != nil:
			case j.Stage == "done":
				done = j.File
			case j.Stage == "uploaded" && strings.HasPrefix(j.RateLimit, want) && j.RateLimitUntil != nil:
				parked = append(parked, j.File)
			}
		}
		return done != "" && len(parked) == 2
	})
	if n := sim.Stats().Total(apisim.RoutePublish); n != 1 {
		t.Errorf("%d publishes sent, want 1: the window allows one", n)
	}
	code, out, stderr := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || strings.Count(out, "rate limit "+want) != 2 || strings.Contains(out, "waiting for") {
		t.Errorf("splatd jobs (exit %d) does not show the two parked jobs as %q, and no job waiting for a worker:\n%s%s",
			code, "rate limit "+want, out, stderr)
	}
}

// TestE2EJobsSayTheyWaitForAWorker: with its one worker busy uploading a
// large file (storage slowed down), a queued file that is due says it
// waits for a free worker, and how many are busy; it showed no reason.
func TestE2EJobsSayTheyWaitForAWorker(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{StorageBandwidth: 256 << 10}) // 8 MiB: about 30 s
	e := newE2EEnv(t, sim, e2eConfig{workers: 1})
	d := startDaemon(t, e.cfgPath)
	defer d.kill()
	d.waitStarted()
	writeBigPLY(t, filepath.Join(e.inbox, "big.ply"), 8<<20)
	waitFor(t, "the big file uploading", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		return err == nil && len(jobs) == 1 && strings.HasPrefix(jobs[0].Activity, "uploading ")
	})
	writePLY(t, filepath.Join(e.inbox, "small.ply"), 2300)
	const want = "a free worker (1 of 1 busy)"
	var waiting string
	waitFor(t, "the small file waiting for the worker", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		waiting = ""
		for _, j := range jobs {
			if err == nil && j.WaitingFor == want {
				waiting = j.File
			}
		}
		return waiting != ""
	})
	code, out, stderr := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "waiting for "+want) {
		t.Errorf("splatd jobs (exit %d) does not say %q of %s:\n%s%s", code, "waiting for "+want, filepath.Base(waiting), out, stderr)
	}
}

// TestE2ELogLinesAreWellFormed: every log line is one JSON object with
// level, time and message, and no key twice (collectors keep one of two
// equal keys at random, or reject the line). A repeated "component" comes
// from a logger scoped twice: by the daemon (cmd/splatd/daemon.go) and by
// the package it is given to (e.g. metrics/server.go's log calls add
// component=metrics to the daemon's component=http).
func TestE2ELogLinesAreWellFormed(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{logLevel: "debug"})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	p := filepath.Join(e.inbox, "log.ply")
	writePLY(t, p, 2400)
	waitReceipt(t, p, "done")
	if code := d.stop(); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	bad := 0
	for i, line := range strings.Split(strings.TrimRight(d.log(), "\n"), "\n") {
		if err := checkLogLine(line); err != nil {
			bad++
			if bad <= 5 {
				t.Errorf("log line %d: %v\n%s", i+1, err, line)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d bad log lines in all", bad)
	}
}

// checkLogLine decodes one line as a JSON object and refuses repeated keys
// and missing level/time/message.
func checkLogLine(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
	}
	for _, k := range []string{"level", "time", "message"} {
		if !seen[k] {
			return fmt.Errorf("no %q", k)
		}
	}
	return nil
}

// TestE2ESidecarsAndAfterActions: a sidecar written just after its splat
// (within settle) sets the published title and format; an invalid sidecar
// fails its splat with the reason; published files move to success_dir
// keeping their folder, failed ones to failure_dir, receipts beside them.
func TestE2ESidecarsAndAfterActions(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	dir := t.TempDir()
	done, failed := filepath.Join(dir, "done"), filepath.Join(dir, "failed")
	e := newE2EEnv(t, sim, e2eConfig{extra: fmt.Sprintf("after: {on_success: move, success_dir: %s, on_failure: move, failure_dir: %s}\n", done, failed)})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	good := filepath.Join(e.inbox, "site", "hall.ply")
	if err := os.MkdirAll(filepath.Dir(good), 0o755); err != nil {
		t.Fatal(err)
	}
	// The sidecar first: a sidecar that follows its splat within settle is
	// the watcher's re-arm (watcher tests); here the settings must apply.
	if err := os.WriteFile(filepath.Join(e.inbox, "site", "hall.splat.yaml"), []byte("title: The Great Hall\nformat: compressed.ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePLY(t, good, 700)
	bad := filepath.Join(e.inbox, "odd.ply")
	writePLY(t, bad, 701)
	if err := os.WriteFile(filepath.Join(e.inbox, "odd.splat.yaml"), []byte("format: ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	moved := filepath.Join(done, "site", "hall.ply")
	r := waitReceipt(t, moved, "done", "failed")
	if r.Status != "done" || r.Title != "The Great Hall" || r.Format != "compressed.ply" || r.File != moved {
		t.Errorf("receipt of the moved file: %+v", r)
	}
	// The receipt is written at the target before the file and its
	// sidecar move there.
	waitFor(t, "the file and its sidecar moved", func() bool {
		_, sc := os.Stat(filepath.Join(done, "site", "hall.splat.yaml"))
		_, src := os.Stat(good)
		return sc == nil && os.IsNotExist(src)
	})
	var rec *apisim.SplatRecord
	for _, s := range sim.Splats() {
		if s.Title == "The Great Hall" {
			rec = &s
		}
	}
	if rec == nil || rec.Format != "compressed.ply" {
		t.Errorf("server has no splat titled from the sidecar with format compressed.ply: %+v", sim.Splats())
	}

	rb := waitReceipt(t, filepath.Join(failed, "odd.ply"), "done", "failed")
	// As above: the receipt reaches failure_dir before the file does.
	waitFor(t, "the failed file moved", func() bool {
		_, err := os.Stat(filepath.Join(failed, "odd.ply"))
		_, src := os.Stat(bad)
		return err == nil && os.IsNotExist(src)
	})
	if rb.Status != "failed" || !strings.Contains(rb.Message, "odd.splat.yaml") || !strings.Contains(rb.Message, "format") {
		t.Errorf("receipt of the file with a bad sidecar: %+v", rb)
	}
	if n := sim.PublishesByHash()[fileSHA256(t, filepath.Join(failed, "odd.ply"))]; n != 0 {
		t.Errorf("file with an invalid sidecar was published %d times", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2EDemo: `make demo` is the newcomer's first run; it publishes the
// three samples, rejects the invalid one with its reason and exits 0.
func TestE2EDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := runCLI(t, nil, "demo", "-dir", dir)
	if code != 0 {
		t.Fatalf("splatd demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// Again in the same folder: the samples are known there, so the demo
	// refuses instead of passing with nothing published.
	if code, out2, errOut := runCLI(t, nil, "demo", "-dir", dir); code == 0 || !strings.Contains(errOut, "earlier demo") {
		t.Errorf("a second demo in %s: exit %d, stdout %q, stderr %q; want a refusal naming the earlier demo", dir, code, out2, errOut)
	}
	for _, want := range []string{"lobby.ply", "statue.compressed.ply", "garden.sog", "processing → done", "/view?id=",
		"broken.ply               queued     → failed      invalid file:", "demo passed", "0 storage requests with an Authorization header"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

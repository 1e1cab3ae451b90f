package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// withStateDir writes a copy of e's config that uses stateDir and returns
// its path: a second daemon (or state) on the same watch folder.
func withStateDir(t *testing.T, e *e2eEnv, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(b), "state_dir: "+e.stateDir, "state_dir: "+stateDir, 1)
	p := filepath.Join(filepath.Dir(stateDir), filepath.Base(stateDir)+".yaml")
	if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rawJobs is `splatd jobs -json` with every field.
func rawJobs(t *testing.T, cfg string) []map[string]any {
	t.Helper()
	code, out, stderr := runCLI(t, nil, "jobs", "-config", cfg, "-json")
	if code != 0 {
		t.Fatalf("splatd jobs exited %d: %s", code, stderr)
	}
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("jobs -json: %v\n%s", err, out)
	}
	return jobs
}

// TestE2ENewStateDirAdoptsReceipts is issue 15's first case, replayed: a
// second daemon with a fresh state directory on a folder of published
// files publishes none of them again (it adopts them from their receipts
// and says so once), still publishes a new file, and `splatd adopt`
// rebuilds a state from the receipts, live or offline.
func TestE2ENewStateDirAdoptsReceipts(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	var files []string
	for i := range 3 {
		p := filepath.Join(e.inbox, fmt.Sprintf("scan%d.ply", i))
		writePLY(t, p, 300+i)
		files = append(files, p)
	}
	for _, p := range files {
		waitReceipt(t, p, "done")
	}
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d", code)
	}
	if n := sim.Stats().Publishes; n != 3 {
		t.Fatalf("%d publishes, want 3", n)
	}

	// A scratch state directory on the same folder.
	second := withStateDir(t, e, filepath.Join(e.dir, "state2"))
	d2 := startDaemon(t, second)
	d2.waitStarted()
	l := d2.waitLogLine("folder holds receipts this state directory did not know")
	// The line is logged once, with the folder's receipts and what the
	// first batch adopted (the watcher may hand the files over in several
	// batches); the three adopted jobs are checked below.
	if a, _ := l["adopted"].(float64); l["receipts"] != float64(3) || a < 1 {
		t.Errorf("log line counts: %v", l)
	}
	waitFor(t, "three adopted jobs", func() bool {
		jobs, err := adminJobs(t, filepath.Join(e.dir, "state2"))
		return err == nil && len(jobs) == 3 && jobs[0].Stage == "done" && jobs[2].Stage == "done"
	})
	fresh := filepath.Join(e.inbox, "new.ply")
	writePLY(t, fresh, 400)
	waitReceipt(t, fresh, "done")
	if n := sim.Stats().Publishes; n != 4 {
		t.Errorf("%d publishes, want 4 (3 adopted, not republished, and the new one)", n)
	}
	for _, j := range rawJobs(t, second) {
		if j["file"] != fresh && j["adopted"] != true {
			t.Errorf("job not adopted: %v", j)
		}
	}
	// Through the admin socket: everything is known now.
	code, out, stderr := runCLI(t, nil, "adopt", "-config", second, "-dry-run", e.inbox)
	if code != 0 || !strings.Contains(out, "would adopt 0 file(s) as done; 4 already known") {
		t.Errorf("adopt -dry-run on the live daemon: %d %q %q", code, out, stderr)
	}
	if code := d2.stop(); code != 0 {
		t.Fatalf("splatd exited %d", code)
	}

	// Offline, into a state directory that does not exist yet.
	third := withStateDir(t, e, filepath.Join(e.dir, "state3"))
	code, out, _ = runCLI(t, nil, "adopt", "-config", third, "-dry-run", e.inbox)
	if code != 0 || !strings.Contains(out, "would adopt 4 file(s) as done") {
		t.Errorf("adopt -dry-run offline: %d %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "state3")); !os.IsNotExist(err) {
		t.Errorf("a dry run created the state directory: %v", err)
	}
	code, out, _ = runCLI(t, nil, "adopt", "-config", third, e.inbox)
	if code != 0 || !strings.Contains(out, "adopted 4 file(s) as done") || !strings.Contains(out, "adopted "+files[0]) {
		t.Errorf("adopt offline: %d %q", code, out)
	}
	if jobs := rawJobs(t, third); len(jobs) != 4 {
		t.Errorf("%d jobs after adopt, want 4", len(jobs))
	}
	if n := sim.Stats().Publishes; n != 4 {
		t.Errorf("%d publishes after adopt, want 4", n)
	}
}

// TestE2EUnremovableSourceUnderMove is issue 15's second case: with
// on_success: move and a source that cannot be removed (immutable), the
// failure is visible (jobs, metric, /readyz degraded), leaves no copy in
// success_dir across a restart, and the move completes once it can.
func TestE2EUnremovableSourceUnderMove(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	done := filepath.Join(t.TempDir(), "done")
	e := newE2EEnv(t, sim, e2eConfig{extra: fmt.Sprintf("after: {on_success: move, success_dir: %s}\n", done)})
	src := filepath.Join(e.inbox, "ro1.ply")
	writePLY(t, src, 500)
	if out, err := exec.Command("chattr", "+i", src).CombinedOutput(); err != nil {
		t.Skipf("cannot make a file immutable here (chattr +i: %v %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", src).Run() })

	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()
	waitFor(t, "the move to fail visibly", func() bool {
		for _, j := range rawJobs(t, e.cfgPath) {
			if j["after_action"] == "move" && strings.Contains(fmt.Sprint(j["after_error"]), "copy") {
				return true
			}
		}
		return false
	})
	code, body := httpGet(t, "http://"+addr+"/readyz")
	if code != 200 || !strings.HasPrefix(body, "degraded: ") || !strings.Contains(body, "move") {
		t.Errorf("/readyz = %d %q, want 200 degraded: … move", code, body)
	}
	_, text := httpGet(t, "http://"+addr+"/metrics")
	if v, ok := promSample(text, "splatd_after_action_errors_total", map[string]string{"action": "move"}); !ok || v < 1 {
		t.Errorf("splatd_after_action_errors_total{action=move} = %v (present %v)", v, ok)
	}
	// The receipt is evidence even though the file stayed.
	if r, ok := readReceipt(t, src); !ok || r.Status != "done" {
		t.Errorf("no done receipt beside the unmoved file: %+v", r)
	}
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d", code)
	}
	d = startDaemon(t, e.cfgPath) // the after-action runs again at start
	d.waitStarted()
	d.waitLogLine("after-action failed")
	entries, _ := os.ReadDir(filepath.Join(done))
	if len(entries) != 0 {
		t.Errorf("success_dir holds %d entries after two failed moves, want none (no second copy)", len(entries))
	}

	exec.Command("chattr", "-i", src).Run() // the operator fixes it
	moved := filepath.Join(done, "ro1.ply")
	waitReceipt(t, moved, "done") // retried on its backoff, no restart
	// The receipt is written at the target before the file moves there
	// (and by every failed attempt, removed again after it).
	waitFor(t, "the file moved and its source gone", func() bool {
		_, err := os.Stat(moved)
		_, gone := os.Stat(src)
		return err == nil && os.IsNotExist(gone)
	})
	if r, ok := readReceipt(t, moved); !ok || r.Status != "done" {
		t.Errorf("no done receipt beside the moved file: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(done, "ro1.1.ply")); !os.IsNotExist(err) {
		t.Error("a second copy ro1.1.ply exists")
	}
	if n := sim.Stats().Publishes; n != 1 {
		t.Errorf("%d publishes, want 1", n)
	}
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d", code)
	}
}

// TestE2EMaxServerWaitCapsThePacer: a 429 asking for an hour (Retry-After:
// 3600) holds the route's class for no longer than api.max_server_wait, in
// the pacer as in the retry rule. The pacer capped it at its own two
// minutes, whatever the config said.
func TestE2EMaxServerWaitCapsThePacer(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	sim.SetFaults(apisim.Faults{Errors: map[string]int{apisim.RoutePublish: 1}, ErrorStatus: http.StatusTooManyRequests, ErrorRetryAfter: "3600"})
	e := newE2EEnv(t, sim, e2eConfig{})
	writeConfig(t, e.cfgPath, strings.Replace(readFile(t, e.cfgPath), "  timeout: 30s\n", "  timeout: 30s\n  max_server_wait: 2s\n", 1))
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	f := filepath.Join(e.inbox, "held.ply")
	writePLY(t, f, 1100)
	if r := waitReceipt(t, f, "done", "failed"); r.Status != "done" {
		t.Errorf("held.ply: %s (%s)", r.Status, r.Message)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

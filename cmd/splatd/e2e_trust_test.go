//go:build !windows

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2EHostileFolderPipes is issue 22's finding 4 against the daemon: a
// named pipe where a receipt is looked for (r.ply.splat.json) and two
// where sidecars are (both workers would block on them), present at start.
// On main the intake blocked on the first pipe: nothing was queued and
// SIGTERM did not stop the daemon. Now the valid files publish, the files
// with a pipe for a sidecar fail saying so, and SIGTERM stops it.
func TestE2EHostileFolderPipes(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{workers: 2})
	ok := filepath.Join(e.inbox, "ok.ply")
	r := filepath.Join(e.inbox, "r.ply")
	s1 := filepath.Join(e.inbox, "s1.ply")
	s2 := filepath.Join(e.inbox, "s2.ply")
	for i, f := range []string{ok, r, s1, s2} {
		writePLY(t, f, 1000+i)
	}
	for _, p := range []string{r + ".splat.json", filepath.Join(e.inbox, "s1.splat.yaml"), filepath.Join(e.inbox, "s2.splat.yaml")} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { // a reader still blocked on it (the code on main) returns
			if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		})
	}
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	if rc := waitReceipt(t, ok, "done", "failed", "duplicate"); rc.Status != "done" {
		t.Errorf("ok.ply: %s (%s), want done", rc.Status, rc.Message)
	}
	for _, f := range []string{s1, s2} {
		rc := waitReceipt(t, f, "done", "failed", "duplicate")
		if rc.Status != "failed" || !strings.Contains(rc.Message, "named pipe") {
			t.Errorf("%s: %s (%s), want failed naming the pipe", filepath.Base(f), rc.Status, rc.Message)
		}
	}
	// r.ply's pipe is not a receipt: the file is published as usual and
	// its receipt replaces the pipe (never read or written through).
	waitFor(t, "r.ply's receipt to replace the pipe", func() bool {
		fi, err := os.Lstat(r + ".splat.json")
		return err == nil && fi.Mode().IsRegular()
	})
	if rc := waitReceipt(t, r, "done", "failed", "duplicate"); rc.Status != "done" {
		t.Errorf("r.ply: %s (%s), want done", rc.Status, rc.Message)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d after SIGTERM, want 0", code)
	}
}

// TestE2ENestedWatchFolderSwappedForALink: a watch folder inside another
// one is in that folder's hands: a writer of the outer folder replaces the
// inner one by a link to a folder outside (mv client-a .old; ln -s /outside
// client-a). Opened by its own path, the inner folder followed the link: a
// file outside was published, then deleted by on_success: delete, and a
// receipt was written beside it. Now the inner folder is opened through the
// outer one and refused; the outside folder is untouched, and the daemon
// goes on publishing.
func TestE2ENestedWatchFolderSwappedForALink(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{extra: "after: {on_success: delete}\n"})
	inner := filepath.Join(e.inbox, "client-a")
	outside := filepath.Join(e.dir, "outside")
	for _, d := range []string{inner, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret.ply")
	writePLY(t, secret, 1400)
	cfg := readFile(t, e.cfgPath)
	cfg = strings.Replace(cfg, "watch:\n", "watch:\n  - path: "+inner+"\n    mode: poll\n    poll_interval: 200ms\n", 1)
	writeConfig(t, e.cfgPath, cfg)
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	first := filepath.Join(inner, "first.ply")
	writePLY(t, first, 1100)
	if r := waitReceipt(t, first, "done", "failed"); r.Status != "done" {
		t.Fatalf("first.ply in the inner folder: %s (%s)", r.Status, r.Message)
	}

	if err := os.Rename(inner, filepath.Join(e.inbox, ".old-a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, inner); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to refuse the inner folder, now a link out of the outer one (or to take the file outside)", func() bool {
		_, gone := os.Stat(secret)
		_, receipt := os.Lstat(secret + ".splat.json")
		return strings.Contains(d.log(), "leads out of the watch folder "+e.inbox) || gone != nil || receipt == nil
	})
	later := filepath.Join(e.inbox, "later.ply")
	writePLY(t, later, 1200)
	if r := waitReceipt(t, later, "done", "failed"); r.Status != "done" {
		t.Errorf("later.ply: %s (%s)", r.Status, r.Message)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the file outside the watch folders: %v (deleted by on_success: delete?)", err)
	}
	if _, err := os.Lstat(secret + ".splat.json"); err == nil {
		t.Error("a receipt was written in the folder outside")
	}
	if n := len(sim.Splats()); n != 2 {
		t.Errorf("%d splats, want 2 (first.ply and later.ply; not the file outside)", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2ELongestNames: a file whose name is as long as the file system
// allows (255 bytes) has no room for a sidecar or a receipt name. It is
// published: the sidecar it cannot have is absent (it failed with "file
// name too long"), and the receipt is left out with a warning instead of
// being retried for ever (the after-action kept /readyz degraded).
func TestE2ELongestNames(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()
	long := filepath.Join(e.inbox, strings.Repeat("L", 251)+".ply")
	writePLY(t, long, 1100)
	var job e2eJob
	waitFor(t, "the long name's job to end", func() bool {
		jobs, _ := adminJobs(t, e.stateDir)
		for _, j := range jobs {
			if j.File == long && (j.Stage == "done" || j.Stage == "failed") {
				job = j
				return true
			}
		}
		return false
	})
	if job.Stage != "done" {
		t.Fatalf("the longest name: %s (%s), want done", job.Stage, job.Error)
	}
	waitFor(t, "the warning that its receipt is not written", func() bool { return strings.Contains(d.log(), "receipt not written") })
	jobs, _ := adminJobs(t, e.stateDir)
	for _, j := range jobs {
		if j.AfterErr != "" {
			t.Errorf("job %d: after-action failing (%s), want it finished without a receipt", j.ID, j.AfterErr)
		}
	}
	if code, body := httpGet(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d %q, want 200", code, body)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2EDeepSidecarSettings is the reviewer's reproduction: a sidecar
// d.splat.yaml whose settings nest 9998 levels (YAML takes 10000) beside
// d.ply. On main the job was stored with them and could not be read back:
// every claim, `splatd jobs` and stats failed from then on, and the
// watchdog killed the daemon at every start. Now d.ply fails saying why,
// the other file publishes, `splatd jobs` answers and SIGTERM stops it.
func TestE2EDeepSidecarSettings(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{workers: 2})
	deep := filepath.Join(e.inbox, "d.ply")
	ok := filepath.Join(e.inbox, "ok.ply")
	n := 9998
	if err := os.WriteFile(filepath.Join(e.inbox, "d.splat.yaml"), []byte("settings:\n  a: "+strings.Repeat("[", n)+strings.Repeat("]", n)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePLY(t, deep, 1000)
	writePLY(t, ok, 1001)
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	if rc := waitReceipt(t, deep, "done", "failed", "duplicate"); rc.Status != "failed" || !strings.Contains(rc.Message, "d.splat.yaml: settings: nested more than 32 levels deep") {
		t.Errorf("d.ply: %s (%s), want failed naming the sidecar and its depth", rc.Status, rc.Message)
	}
	if rc := waitReceipt(t, ok, "done", "failed", "duplicate"); rc.Status != "done" {
		t.Errorf("ok.ply: %s (%s), want done", rc.Status, rc.Message)
	}
	if code, out, errOut := runCLI(t, nil, "jobs", "-config", e.cfgPath); code != 0 || !strings.Contains(out, "nested more than 32 levels") {
		t.Errorf("jobs: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d after SIGTERM, want 0", code)
	}
}

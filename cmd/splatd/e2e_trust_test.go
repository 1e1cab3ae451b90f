//go:build !windows

package main

import (
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

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2EControl runs cancel, republish and forget against a running
// daemon through the CLI.
func TestE2EControl(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()

	// cancel: a file shorter than its header waits in queued; canceled, it
	// ends as canceled (not failed), with a receipt saying so.
	short := filepath.Join(e.inbox, "short.ply")
	writePLY(t, short, 1300)
	fi, err := os.Stat(short)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(short, fi.Size()-200); err != nil {
		t.Fatal(err)
	}
	var id uint64
	waitFor(t, "short.ply queued as incomplete", func() bool {
		jobs, _ := adminJobs(t, e.stateDir)
		for _, j := range jobs {
			if j.File == short && j.Stage == "queued" && strings.Contains(j.Error, "incomplete") {
				id = j.ID
				return true
			}
		}
		return false
	})
	code, out, errOut := runCLI(t, nil, "cancel", "-config", e.cfgPath, "notanumber")
	if code != 2 {
		t.Errorf("cancel notanumber: exit %d, want 2 (usage); stderr %q", code, errOut)
	}
	code, out, errOut = runCLI(t, nil, "cancel", fmt.Sprint(id), "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "canceled") {
		t.Fatalf("cancel %d: exit %d, stdout %q, stderr %q", id, code, out, errOut)
	}
	if r := waitReceipt(t, short, "canceled"); !strings.Contains(r.Message, "canceled") {
		t.Errorf("receipt of the canceled job: %+v", r)
	}
	_, body := httpGet(t, "http://"+addr+"/metrics")
	if v, _ := promSample(body, "splatd_jobs_finished_total", map[string]string{"result": "canceled"}); v != 1 {
		t.Errorf("jobs_finished_total{result=canceled} = %v, want 1", v)
	}
	if v, _ := promSample(body, "splatd_jobs_finished_total", map[string]string{"result": "failed"}); v != 0 {
		t.Errorf("jobs_finished_total{result=failed} = %v, want 0: a cancel is no failure", v)
	}
	code, _, errOut = runCLI(t, nil, "cancel", "-config", e.cfgPath, fmt.Sprint(id))
	if code != 1 || !strings.Contains(errOut, "cannot be canceled") {
		t.Errorf("second cancel: exit %d, stderr %q; want 1 with the reason", code, errOut)
	}

	// republish: a done file is published again, on purpose.
	one := filepath.Join(e.inbox, "one.ply")
	writePLY(t, one, 1100)
	waitReceipt(t, one, "done")
	sha := fileSHA256(t, one)
	if err := os.Remove(one + ".splat.json"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "republish", "-config", e.cfgPath, one)
	if code != 0 || !strings.Contains(out, "generation 1") {
		t.Fatalf("republish %s: exit %d, stdout %q, stderr %q", one, code, out, errOut)
	}
	waitReceipt(t, one, "done")
	waitFor(t, "the second publish", func() bool { return sim.PublishesByHash()[sha] == 2 })

	// forget: the job goes with the receipt it left, and the unchanged file
	// is found again as new and published again (its content is no longer
	// remembered; the receipt would have had it adopted back).
	var oneID uint64
	jobs, err := adminJobs(t, e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.File == one {
			oneID = j.ID
		}
	}
	code, out, errOut = runCLI(t, nil, "forget", "-config", e.cfgPath, fmt.Sprint(oneID))
	if code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("forget %d: exit %d, stdout %q, stderr %q", oneID, code, out, errOut)
	}
	waitReceipt(t, one, "done")
	waitFor(t, "the publish after forget", func() bool { return sim.PublishesByHash()[sha] == 3 })
	jobs, _ = adminJobs(t, e.stateDir)
	for _, j := range jobs {
		if j.ID == oneID {
			t.Errorf("forgotten job %d still listed: %+v", oneID, j)
		}
	}
	code, _, errOut = runCLI(t, nil, "forget", "-config", e.cfgPath, "999")
	if code != 1 || !strings.Contains(errOut, "no job 999") {
		t.Errorf("forget 999: exit %d, stderr %q", code, errOut)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2EReload: SIGHUP and `splatd reload` apply a new config without a
// restart, refuse an invalid one and name the keys that need a restart.
func TestE2EReload(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	orig, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(e.dir, "second")
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	// A second folder, a bandwidth limit and a debug level, by SIGHUP.
	cfg := strings.Replace(string(orig), "watch:\n", fmt.Sprintf("upload:\n  bandwidth: 50MiB/s\nwatch:\n  - path: %s\n", second), 1)
	cfg = strings.Replace(cfg, "level: info", "level: debug", 1)
	writeConfig(t, e.cfgPath, cfg)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	l := d.waitLogLine("config reloaded")
	applied := fmt.Sprint(l["applied"])
	for _, k := range []string{"watch", "upload.bandwidth", "log.level"} {
		if !strings.Contains(applied, k) {
			t.Errorf("reload applied %s, want %s among them", applied, k)
		}
	}
	if l["bandwidth"] != "50MiB/s" {
		t.Errorf("bandwidth after reload = %v", l["bandwidth"])
	}
	f := filepath.Join(second, "two.ply")
	writePLY(t, f, 1200)
	waitReceipt(t, f, "done")

	// An invalid config is refused by the CLI and by the daemon (SIGHUP);
	// the daemon runs on.
	writeConfig(t, e.cfgPath, cfg+"workers: 0\n")
	code, out, errOut := runCLI(t, nil, "reload", "-config", e.cfgPath)
	if code != 1 || !strings.Contains(errOut, "workers") || !strings.Contains(errOut, "refused") {
		t.Errorf("reload of an invalid config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.waitLogLine("config reload refused")

	// A key that needs a restart is named and keeps its old value.
	writeConfig(t, e.cfgPath, strings.Replace(cfg, "workers: 2", "workers: 3", 1))
	code, out, errOut = runCLI(t, nil, "reload", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "need a restart") || !strings.Contains(out, "workers") {
		t.Errorf("reload with workers changed: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d.exited() {
		t.Fatal("splatd exited after SIGHUP")
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

func writeConfig(t *testing.T, path, cfg string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

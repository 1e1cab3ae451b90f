package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestNamesAsBytesPublished: names that are not UTF-8, one beside a name
// that differs only in those bytes, and one with a bidi override are each
// published as themselves through the watcher, each with its own content
// and its receipt beside it; the log and `splatd jobs` escape them.
func TestNamesAsBytesPublished(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	names := []string{"\xff\xfe.ply", "caf\xe9.ply", "caf\ufffd.ply", "scan\u202egnp.ply"}
	sums := map[string]string{}
	for i, n := range names {
		f := filepath.Join(e.inbox, n)
		writePLY(t, f, 900+100*i)
		sums[f] = fileSHA256(t, f)
	}
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	for f := range sums {
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" {
			t.Errorf("%q: receipt %q (%s), want done", filepath.Base(f), r.Status, r.Message)
		}
	}
	for sha, n := range sim.PublishesByHash() {
		if n != 1 {
			t.Errorf("content %s published %d times", sha, n)
		}
	}
	for f, sum := range sums {
		if sim.PublishesByHash()[sum] != 1 {
			t.Errorf("%q: its content was not published once", filepath.Base(f))
		}
	}
	for _, out := range []string{d.log(), jobsTable(t, e.cfgPath)} {
		if strings.Contains(out, "\u202e") || strings.Contains(out, "\xff") || strings.Contains(out, "\xe9") {
			t.Errorf("a display printed a name's raw bytes:\n%s", out)
		}
	}
	if log := d.log(); !strings.Contains(log, `caf\\xe9.ply`) || !strings.Contains(log, `\\xff\\xfe.ply`) || !strings.Contains(log, `scan\\u202egnp.ply`) {
		t.Errorf("the log does not show the names' bytes as escapes:\n%s", log)
	}
	if out := jobsTable(t, e.cfgPath); !strings.Contains(out, `\xff\xfe.ply`) || !strings.Contains(out, `caf\xe9.ply`) || !strings.Contains(out, `scan\u202egnp.ply`) {
		t.Errorf("splatd jobs does not show the escaped names:\n%s", out)
	}
	d.stop()
	if _, err := os.Stat(filepath.Join(e.inbox, "caf\xe9.ply.splat.json")); err != nil {
		t.Errorf("receipt of the Latin-1 name: %v", err)
	}
}

func jobsTable(t *testing.T, cfg string) string {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "jobs", "-config", cfg)
	if code != 0 {
		t.Fatalf("jobs: exit %d\n%s", code, errOut)
	}
	return out
}

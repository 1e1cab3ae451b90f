package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/apisim"
)

// zeroPages zeroes every page of the state file in stateDir but its two
// meta pages: whatever it held is lost, and bbolt would panic on it.
func zeroPages(t *testing.T, stateDir string) {
	t.Helper()
	path := filepath.Join(stateDir, queue.FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ps := int64(db.Info().PageSize)
	db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, fi.Size()-2*ps), 2*ps); err != nil {
		t.Fatal(err)
	}
}

// publishScans writes n PLYs (scan-a.ply, …, of growing size) into e's
// inbox, runs a daemon until each has its done receipt, and stops it.
func publishScans(t *testing.T, e *e2eEnv, n int) []string {
	t.Helper()
	var files []string
	for i := range n {
		f := filepath.Join(e.inbox, "scan-"+string(rune('a'+i))+".ply")
		writePLY(t, f, 900+100*i)
		files = append(files, f)
	}
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	for _, f := range files {
		waitReceipt(t, f, "done")
	}
	if code := d.stop(); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	return files
}

// TestStateDamagedAndRecovered: with every page but the meta pages zeroed,
// the state makes `splatd run` exit 1 with one message naming the file and
// the command that recovers, and `jobs` fail the same way, without a
// panic; `state check` says damaged; `state recover` keeps the file aside
// and adopts the receipts; the daemon then starts and publishes nothing
// again.
func TestStateDamagedAndRecovered(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	files := publishScans(t, e, 8)
	var d *e2eDaemon
	published := sim.Stats().Publishes
	zeroPages(t, e.stateDir)

	d = startDaemon(t, e.cfgPath)
	if code := d.waitExit(); code != 1 {
		t.Fatalf("run on a damaged state: exit %d, want 1", code)
	}
	log := d.log()
	if strings.Contains(log, "panic") || strings.Count(log, `"level":"error"`) != 1 ||
		!strings.Contains(log, filepath.Join(e.stateDir, queue.FileName)) || !strings.Contains(log, "splatd state recover -config "+e.cfgPath) {
		t.Fatalf("run on a damaged state logged:\n%s", log)
	}
	code, out, errOut := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 1 || strings.Contains(out+errOut, "panic") || !strings.Contains(errOut, "damaged") {
		t.Fatalf("jobs: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, nil, "state", "check", "-config", e.cfgPath)
	if code != 1 || !strings.Contains(out, "DAMAGED") {
		t.Fatalf("state check: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, nil, "state", "recover", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "kept the damaged file aside") || !strings.Contains(out, "adopted 8 file(s)") {
		t.Fatalf("state recover: exit %d\n%s\n%s", code, out, errOut)
	}
	aside, _ := filepath.Glob(filepath.Join(e.stateDir, queue.FileName+".damaged-*"))
	if len(aside) != 1 {
		t.Fatalf("damaged file kept aside: %v", aside)
	}
	if code, out, _ := runCLI(t, nil, "state", "check", "-config", e.cfgPath); code != 0 || !strings.Contains(out, "sound") {
		t.Fatalf("state check after recover: exit %d\n%s", code, out)
	}

	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	jobs, err := adminJobs(t, e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, j := range jobs {
		if j.Stage == "done" && j.Adopted {
			done++
		}
	}
	if done != len(files) {
		t.Errorf("after recovery %d adopted done jobs, want %d: %+v", done, len(files), jobs)
	}
	if got := sim.Stats().Publishes; got != published {
		t.Errorf("publishes %d after the recovery, %d before: a file was published twice", got, published)
	}
	d.stop()
}

// TestEmptyStateBesideReceipts: a 0-byte splatd.db beside published files
// is no silent fresh start: the daemon says it starts with an empty store
// and adopts the files from their receipts, publishing none again.
func TestEmptyStateBesideReceipts(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	files := publishScans(t, e, 3)
	var d *e2eDaemon
	published := sim.Stats().Publishes
	if err := os.Truncate(filepath.Join(e.stateDir, queue.FileName), 0); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(t, nil, "state", "check", "-config", e.cfgPath); code != 1 || !strings.Contains(out, "empty (0 bytes)") {
		t.Fatalf("state check of an empty file: exit %d\n%s", code, out)
	}
	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	l := d.waitLogLine("starting with an empty job store (splatd.db was empty (0 bytes): whatever it held is lost): a file whose receipt proves it published is adopted as done, not published again; the others are published")
	if l["level"] != "warn" {
		t.Errorf("the empty start is logged at %v", l["level"])
	}
	waitFor(t, "the files adopted", func() bool {
		jobs, err := adminJobs(t, e.stateDir)
		n := 0
		for _, j := range jobs {
			if j.Stage == "done" && j.Adopted {
				n++
			}
		}
		return err == nil && n == len(files)
	})
	if got := sim.Stats().Publishes; got != published {
		t.Errorf("publishes %d after the empty start, %d before", got, published)
	}
	d.stop()
}

// TestStateRecoveredV1WithoutReceipts: under v1 a damaged store and lost
// receipts still publish nothing twice: after `state recover` each file's
// Idempotency-Key names its old session, so the files end done with their
// old splats and the service makes no new one.
func TestStateRecoveredV1WithoutReceipts(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{protocol: "v1"})
	files := publishScans(t, e, 4)
	urls := map[string]string{}
	for _, f := range files {
		urls[f] = mustReceipt(t, f).Splat.URL
	}
	var d *e2eDaemon
	before := sim.Stats()
	zeroPages(t, e.stateDir)
	for _, f := range files {
		if err := os.Remove(f + ".splat.json"); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, nil, "state", "recover", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "kept the damaged file aside") {
		t.Fatalf("state recover: exit %d\n%s\n%s", code, out, errOut)
	}

	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	for _, f := range files {
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" || r.Splat.URL != urls[f] {
			t.Errorf("%s after recovery: receipt %q %s, want done %s", filepath.Base(f), r.Status, r.Splat.URL, urls[f])
		}
	}
	after := sim.Stats()
	if after.V1Splats != before.V1Splats || after.Creates != before.Creates {
		t.Errorf("after recovery the service made %d splat(s) and %d session(s) more, want none", after.V1Splats-before.V1Splats, after.Creates-before.Creates)
	}
	d.stop()
}

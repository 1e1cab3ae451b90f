package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2ELeftoverOfAMoveAtStart is issue 36's power cut seen at the next
// start: a file back in the inbox beside its receipt in success_dir (the
// move's link and unlink lost, its receipt kept) is moved again, and a
// receipt in success_dir whose file is at neither place is logged; neither
// is published again.
func TestE2ELeftoverOfAMoveAtStart(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	done := filepath.Join(t.TempDir(), "done")
	e := newE2EEnv(t, sim, e2eConfig{extra: fmt.Sprintf("after: {on_success: move, success_dir: %s}\n", done)})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	back, gone := filepath.Join(e.inbox, "rig", "back.ply"), filepath.Join(e.inbox, "gone.ply")
	if err := os.MkdirAll(filepath.Dir(back), 0o755); err != nil {
		t.Fatal(err)
	}
	writePLY(t, back, 700)
	writePLY(t, gone, 701)
	movedBack, movedGone := filepath.Join(done, "rig", "back.ply"), filepath.Join(done, "gone.ply")
	waitReceipt(t, movedBack, "done")
	waitReceipt(t, movedGone, "done")
	waitFor(t, "both files to leave the inbox", func() bool {
		_, e1 := os.Stat(back)
		_, e2 := os.Stat(gone)
		return os.IsNotExist(e1) && os.IsNotExist(e2)
	})
	if code := d.stop(); code != 0 {
		t.Fatalf("splatd exited %d", code)
	}
	if err := os.Rename(movedBack, back); err != nil { // the move undone
		t.Fatal(err)
	}
	if err := os.Remove(movedGone); err != nil { // the move lost
		t.Fatal(err)
	}

	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	d.waitLogLine("a power cut undid the move; moving it again")
	l := d.waitLogLine("a receipt without its file")
	if l["receipt"] != movedGone+".splat.json" || l["source"] != gone {
		t.Errorf("the lost file's line: %v", l)
	}
	// The move links the file at its target before it removes the source.
	waitFor(t, "the file moved again, and out of the inbox", func() bool {
		_, err := os.Stat(movedBack)
		_, src := os.Stat(back)
		return err == nil && os.IsNotExist(src)
	})
	if n := len(sim.Splats()); n != 2 {
		t.Errorf("%d splats, want 2 (none published again)", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

// TestE2ELongestNameKeptUnderDelete is issue 36's deliverable 7: with
// on_success: delete, a file whose 255-byte name leaves no room for its
// receipt's is published and kept, not deleted without a trace; splatd
// jobs says why.
func TestE2ELongestNameKeptUnderDelete(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{extra: "after: {on_success: delete}\n"})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	long := filepath.Join(e.inbox, strings.Repeat("L", 251)+".ply")
	writePLY(t, long, 1100)
	var job e2eJob
	waitFor(t, "the long name's receipt error in splatd jobs", func() bool {
		jobs, _ := adminJobs(t, e.stateDir)
		for _, j := range jobs {
			if j.File == long && j.AfterErr != "" {
				job = j
				return true
			}
		}
		return false
	})
	if job.Stage != "done" || !strings.Contains(job.AfterErr, "stays where it is") || !strings.Contains(job.AfterErr, "name longer than") {
		t.Errorf("job: %s, after_error %q; want done, the file kept for its receipt", job.Stage, job.AfterErr)
	}
	if _, err := os.Stat(long); err != nil {
		t.Errorf("the file: %v; want it kept", err)
	}
	d.waitLogLine("after-action failed")
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

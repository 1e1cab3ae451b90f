package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestJobsShowParked: `splatd jobs` shows a parked job's reason, in the
// table and in -json.
func TestJobsShowParked(t *testing.T) {
	t.Parallel()
	j := state.Job{ID: 7, File: state.File{Path: "/watch/a.ply"}, Stage: state.Signed, Wait: state.Wait{Parked: "another daemon is uploading this content's session (1 of 4 parts stored)"},
		NextAttempt: time.Now().Add(time.Minute)}
	v := daemon.ViewOf(j, nil)
	if v.Parked != j.Parked {
		t.Fatalf("view %+v", v)
	}
	var b bytes.Buffer
	printJobs(&b, []daemon.JobView{v}, time.Now())
	if !strings.Contains(b.String(), "parked: another daemon is uploading") {
		t.Errorf("jobs table:\n%s", b.String())
	}
}

// TestE2EFleetOnSuccessMove: two daemons (own state dirs, one token, v1)
// share a watch folder and move what they publish to one success_dir. B
// holds both files' jobs, at most one read (a wrong token pauses B's one
// worker, probed at start) and the other not read yet, while A publishes both and
// moves them, receipts and all. Once B's token is right, both its jobs end
// done with A's outcome, read from the receipts under success_dir: no
// failure ("file is gone"), no replayed complete, no move of B's own.
func TestE2EFleetOnSuccessMove(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	shared := t.TempDir()
	inbox, done := filepath.Join(shared, "inbox"), filepath.Join(shared, "published")
	afterMove := fmt.Sprintf("after: {on_success: move, success_dir: %s}\n", done)
	a := newE2EEnv(t, sim, e2eConfig{protocol: "v1", inbox: inbox, extra: afterMove})
	b := newE2EEnv(t, sim, e2eConfig{protocol: "v1", inbox: inbox, workers: 1, extra: afterMove})
	const wrong = "sim_wrong_token_0a1b2c3d4e5f6789"
	b.setToken(wrong)

	names := []string{"rig/one.ply", "rig/two.ply"}
	sums := map[string]string{}
	for i, n := range names {
		p := filepath.Join(inbox, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writePLY(t, p, 600+i)
		sums[n] = fileSHA256(t, p)
	}

	db := startDaemon(t, b.cfgPath)
	db.waitStarted()
	db.waitLogLine("refused the token")
	// The token probe at start pauses B, mostly before its worker read a
	// file: at most one is read (a create refused), the other not.
	waitFor(t, "B's jobs for both files, one read at most", func() bool {
		jobs, err := adminJobs(t, b.stateDir)
		read := 0
		for _, j := range jobs {
			if j.SHA256 != "" {
				read++
			}
		}
		return err == nil && len(jobs) == len(names) && read <= 1
	})

	da := startDaemon(t, a.cfgPath)
	da.waitStarted()
	for _, n := range names {
		if r := waitReceipt(t, filepath.Join(done, n), "done", "failed"); r.Status != "done" {
			t.Fatalf("A: %s %q (%s), want done", n, r.Status, r.Message)
		}
		// The receipt is written at the target before the file moves
		// there: B must find the move finished, not half done.
		waitFor(t, "A's move of "+n, func() bool {
			_, err := os.Stat(filepath.Join(done, n))
			_, src := os.Stat(filepath.Join(inbox, n))
			return err == nil && os.IsNotExist(src)
		})
	}
	if code := da.stop(); code != 0 {
		t.Errorf("A exited %d", code)
	}
	before := sim.Stats()

	b.setToken(sim.Token())
	var jobs []e2eJob
	waitFor(t, "B's jobs final", func() bool {
		var err error
		jobs, err = adminJobs(t, b.stateDir)
		final := 0
		for _, j := range jobs {
			if j.Stage == "done" || j.Stage == "failed" {
				final++
			}
		}
		return err == nil && final == len(names)
	})
	for _, j := range jobs {
		if j.Stage != "done" {
			t.Errorf("B: %s %s (%s), want done from A's receipt", j.File, j.Stage, j.Error)
		}
	}
	st := sim.Stats()
	if n := st.CompleteReplays - before.CompleteReplays; n != 0 {
		t.Errorf("B replayed complete %d times, want 0: A's receipts name the splats", n)
	}
	for _, n := range names {
		if got := sim.PublishesByHash()[sums[n]]; got != 1 {
			t.Errorf("%s published %d times, want 1", n, got)
		}
		if _, err := os.Stat(filepath.Join(done, strings.TrimSuffix(n, ".ply")+".1.ply")); err == nil {
			t.Errorf("%s moved twice", n)
		}
	}
	if code := db.stop(); code != 0 {
		t.Errorf("B exited %d", code)
	}
}

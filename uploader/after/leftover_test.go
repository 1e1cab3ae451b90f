package after

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// movedThenUndone runs j's move under dest, then puts the state a power
// cut leaves when it keeps the receipt but loses the move's link and
// unlink (a file system, or a splatd, that did not sync them): the file
// back at its source, the job recorded finalized.
func movedThenUndone(t *testing.T, a *Runner, j state.Job) state.Job {
	t.Helper()
	movedRec, err := a.Finish(context.Background(), j)
	moved := movedRec.File
	if err != nil || moved == j.Path {
		t.Fatalf("Finish = %q, %v", moved, err)
	}
	if err := os.Rename(moved, j.Path); err != nil {
		t.Fatal(err)
	}
	j.Finalized = true
	return j
}

// lookupOf is a store that knows the jobs js.
func lookupOf(js ...state.Job) func(uint64) (state.Job, error) {
	return func(id uint64) (state.Job, error) {
		for _, j := range js {
			if j.ID == id {
				return j, nil
			}
		}
		return state.Job{}, errors.New("not found")
	}
}

// TestLeftoverMoveFinishedAtStart: a file back in the inbox beside its
// receipt in success_dir (the move was lost) is moved again; a receipt in
// success_dir whose file is at neither place is logged as lost. Both are
// logged, one line each.
func TestLeftoverMoveFinishedAtStart(t *testing.T) {
	t.Parallel()
	root, dest := t.TempDir(), t.TempDir()
	var logs bytes.Buffer
	a := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Logger: zerolog.New(&logs)})
	back, _ := heldJob(t, root, "rig/back.ply")
	back = movedThenUndone(t, a, back)
	gone, _ := heldJob(t, root, "rig/gone.ply")
	gone.ID = 8
	gone = movedThenUndone(t, a, gone)
	if err := os.Remove(gone.Path); err != nil {
		t.Fatal(err)
	}
	rs := Runners{Default: a}

	moved, lost := rs.FinishLeftovers(context.Background(), lookupOf(back, gone))
	if moved != 1 || lost != 1 {
		t.Fatalf("FinishLeftovers = %d moved, %d lost; want 1, 1\n%s", moved, lost, logs.String())
	}
	target := filepath.Join(dest, "rig", "back.ply")
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the file was not moved again: %v", err)
	}
	if _, err := os.Stat(back.Path); !os.IsNotExist(err) {
		t.Errorf("the file is still at its source: %v", err)
	}
	if r := readReceipt(t, ReceiptPath(target)); r.File != target || r.Job != back.ID {
		t.Errorf("receipt at the target = %+v", r)
	}
	for _, want := range []string{"a power cut undid the move; moving it again", "a receipt without its file", filepath.Join(dest, "rig", "gone.ply.splat.json")} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}

	// A second start finds nothing: the one moved again is beside its
	// receipt; the lost one is logged again (it is still lost).
	moved, lost = rs.FinishLeftovers(context.Background(), lookupOf(back, gone))
	if moved != 0 || lost != 1 {
		t.Errorf("second start: %d moved, %d lost; want 0, 1", moved, lost)
	}
}

// TestLeftoverNotOthers: a receipt beside its file, one of a job this
// state does not know or knows for other content, one of a job whose
// after-action is still pending (the pool runs it), and a file back whose
// root no longer moves are not touched.
func TestLeftoverNotOthers(t *testing.T) {
	t.Parallel()
	root, dest := t.TempDir(), t.TempDir()
	a := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true})
	j, _ := heldJob(t, root, "scan.ply")
	j = movedThenUndone(t, a, j)
	other := j
	other.SHA256 = "0ther"
	pending := j
	pending.Finalized = false
	keeps := New(Options{OnSuccess: "keep", Receipt: true})
	for name, tc := range map[string]struct {
		rs     Runners
		lookup func(uint64) (state.Job, error)
	}{
		"unknown job":     {Runners{Default: a}, lookupOf()},
		"other content":   {Runners{Default: a}, lookupOf(other)},
		"pending":         {Runners{Default: a}, lookupOf(pending)},
		"no longer moves": {Runners{Default: a, Roots: map[string]*Runner{root: keeps}}, lookupOf(j)},
	} {
		if moved, lost := tc.rs.FinishLeftovers(context.Background(), tc.lookup); moved != 0 || lost != 0 {
			t.Errorf("%s: %d moved, %d lost; want none", name, moved, lost)
		}
		if _, err := os.Stat(j.Path); err != nil {
			t.Errorf("%s: the file: %v", name, err)
		}
	}
}

func TestIsNumbered(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/d/scan.ply": true, "/d/scan.1.ply": true, "/d/scan.12.ply": true,
		"/d/scan.0.ply": false, "/d/scan.01.ply": false, "/d/scan..ply": false, "/d/scan.x.ply": false, "/d/scan.ply.ply": false,
	} {
		if got := isNumbered(p, "/d/scan", ".ply"); got != want {
			t.Errorf("isNumbered(%q) = %v, want %v", p, got, want)
		}
	}
	if isNumbered("7.ply", "scan", ".ply") {
		t.Error(`isNumbered("7.ply", "scan", ".ply") = true: a number alone is no numbered name of scan`)
	}
}

// TestPendingMoveOfALostFileSaysSo: a job whose move is still pending
// (its after-action not recorded done) and whose file is at neither place,
// its receipt at the target, fails its move with a reason that says so
// (splatd jobs shows it).
func TestPendingMoveOfALostFileSaysSo(t *testing.T) {
	t.Parallel()
	root, dest := t.TempDir(), t.TempDir()
	a := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true})
	j, _ := heldJob(t, root, "scan.ply")
	j = movedThenUndone(t, a, j)
	if err := os.Remove(j.Path); err != nil {
		t.Fatal(err)
	}
	j.Finalized = false
	_, err := a.Finish(context.Background(), j)
	var ae *ActionError
	if !errors.As(err, &ae) || ae.Action != ActionMove || !errors.Is(err, errFileGone) || !strings.Contains(err.Error(), "where its receipt is") {
		t.Fatalf("Finish = %v; want a move error saying the file is lost, its receipt at the target", err)
	}
}

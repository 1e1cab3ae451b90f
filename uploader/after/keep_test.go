package after

import (
	"context"
	"errors"
	"github.com/splatd/splatd/watcher/trustfs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/state"
)

// TestUnwritableReceiptKeepsTheFile is issue 36's deliverable 7: a delete
// or move whose receipt cannot be written leaves the file where it was,
// with a receipt ActionError saying so (splatd jobs shows it), instead of
// removing the only trace that it was published. Not parallel: a case
// replaces writeReceipt.
func TestUnwritableReceiptKeepsTheFile(t *testing.T) {
	long := strings.Repeat("n", 251) + ".ply" // 255 bytes; its receipt's name, 266
	for _, tt := range []struct {
		name, onSuccess, file string
		refuse                bool // every receipt write fails with EROFS
		want                  string
	}{
		{"delete, name too long", "delete", long, false, "name longer than"},
		{"move, name too long", "move", long, false, "name longer than"},
		{"delete, folder refusing writes", "delete", "scan.ply", true, "read-only file system"},
		{"move, folder refusing writes", "move", "rig/scan.ply", true, "read-only file system"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root, dest := t.TempDir(), t.TempDir()
			j, _ := heldJob(t, root, tt.file)
			if tt.refuse {
				writeReceipt = func(_ *trustfs.FS, _, path string, _ Receipt) error {
					return &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}
				}
				t.Cleanup(func() { writeReceipt = writeReceiptIn })
			}
			a := New(Options{OnSuccess: tt.onSuccess, SuccessDir: dest, Receipt: true})
			for try := range 2 { // the after-action's retries
				fileRec, err := a.Finish(context.Background(), j)
				file := fileRec.File
				var ae *ActionError
				if !errors.As(err, &ae) || ae.Action != ActionReceipt || !strings.Contains(err.Error(), tt.want) ||
					!strings.Contains(err.Error(), "stays where it is") {
					t.Fatalf("try %d: Finish = %q, %v; want a receipt ActionError (%s) saying the file stays", try, file, err, tt.want)
				}
				if file != j.Path {
					t.Errorf("try %d: file = %q, want it where it was", try, file)
				}
				if _, err := os.Stat(j.Path); err != nil {
					t.Fatalf("try %d: the file: %v", try, err)
				}
				if got := names(t, dest); len(got) != 0 {
					t.Errorf("try %d: success_dir holds %q", try, got)
				}
			}
		})
	}
}

// TestUnwritableReceiptOfAGoneFile: a done job whose long-named file is
// gone (renamed by its owner) has nothing to keep: its delete is done.
func TestUnwritableReceiptOfAGoneFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	j := afterTestJob(t, root, strings.Repeat("n", 251)+".ply", state.Done)
	if err := os.Rename(j.Path, filepath.Join(root, "short.ply")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{OnSuccess: "delete", Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatalf("Finish = %v, want done", err)
	}
}

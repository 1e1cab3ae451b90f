package after

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// TestAfterMoveUnremovableSourceLeavesNoCopy is issue 15's "ro1.ply,
// ro1.1.ply, …": a source that cannot be removed must not leave a copy in
// success_dir, however often the move is tried. Not parallel: it replaces
// removeSource.
func TestAfterMoveUnremovableSourceLeavesNoCopy(t *testing.T) {
	root, done := t.TempDir(), t.TempDir()
	j := afterTestJob(t, root, "day1/ro1.ply", state.Done)
	a := New(Options{OnSuccess: "move", SuccessDir: done, Receipt: true})
	removeSource = func(*trustfs.FS, string, string, trustfs.ID) error {
		return &os.PathError{Op: "remove", Path: j.Path, Err: syscall.EPERM}
	}
	t.Cleanup(func() { removeSource = (*trustfs.FS).RemoveIf })

	for try := range 3 { // the pool's retries, or restarts
		fileRec, err := a.Finish(context.Background(), j)
		file := fileRec.File
		var ae *ActionError
		if !errors.As(err, &ae) || ae.Action != ActionMove || !strings.Contains(err.Error(), "copy") {
			t.Fatalf("try %d: Finish = %q, %v; want a move ActionError saying the copy was removed", try, file, err)
		}
		if file != j.Path {
			t.Errorf("try %d: file = %q, want it where it stayed", try, file)
		}
		var copies []string
		filepath.WalkDir(done, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				copies = append(copies, p)
			}
			return nil
		})
		if len(copies) != 0 {
			t.Fatalf("try %d: copies left in success_dir: %v", try, copies)
		}
		if _, err := os.Stat(j.Path); err != nil {
			t.Fatalf("try %d: source: %v", try, err)
		}
		// The evidence is there while the move is retried.
		if r := readReceipt(t, ReceiptPath(j.Path)); r.Status != "done" || r.File != j.Path {
			t.Errorf("try %d: receipt beside the source = %+v", try, r)
		}
	}

	removeSource = (*trustfs.FS).RemoveIf // the operator fixed the permissions
	fileRec, err := a.Finish(context.Background(), j)
	file := fileRec.File
	want := filepath.Join(done, "day1", "ro1.ply")
	if err != nil || file != want {
		t.Fatalf("after the fix: Finish = %q, %v; want %q", file, err, want)
	}
	if r := readReceipt(t, ReceiptPath(want)); r.File != want {
		t.Errorf("receipt at the target = %+v", r)
	}
	if _, err := os.Stat(ReceiptPath(j.Path)); !os.IsNotExist(err) {
		t.Errorf("the receipt left at the source is still there: %v", err)
	}
}

// TestAfterReceiptFailureIsActionError: a receipt that cannot be written is
// an error naming the receipt action (a directory stands where it goes).
func TestAfterReceiptFailureIsActionError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	j := afterTestJob(t, root, "scan.ply", state.Done)
	if err := os.MkdirAll(filepath.Join(ReceiptPath(j.Path), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Receipt: true}).Finish(context.Background(), j)
	var ae *ActionError
	if !errors.As(err, &ae) || ae.AfterAction() != ActionReceipt {
		t.Fatalf("Finish = %v, want a receipt ActionError", err)
	}
}

func TestCheckReceipt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	content := []byte("ply\nformat binary_little_endian 1.0\nend_header\n")
	sum, err := hashFileBytes(content)
	if err != nil {
		t.Fatal(err)
	}
	svc := Service{Protocol: "legacy", API: "https://api.example"}
	ok := Receipt{Status: "done", SHA256: sum, Size: int64(len(content)), Protocol: "legacy", API: "https://api.example"}
	tests := []struct {
		name   string
		rec    *Receipt
		edit   []byte // replaces the content after the receipt
		done   bool
		why    string
		noRecp bool
	}{
		{name: "done, same content", rec: &ok, done: true},
		{name: "duplicate counts", rec: &Receipt{Status: "duplicate", SHA256: sum, Size: ok.Size}, done: true},
		{name: "an old receipt without protocol or api", rec: &Receipt{Status: "done", SHA256: sum, Size: ok.Size}, done: true},
		{name: "no receipt", noRecp: true},
		{name: "failed", rec: &Receipt{Status: "failed", SHA256: sum, Size: ok.Size}, why: "not done"},
		{name: "same size, other content", rec: &ok, edit: []byte(strings.ToUpper(string(content))), why: "sha256 differs"},
		{name: "other size", rec: &ok, edit: append(content, 'x'), why: "size"},
		{name: "another protocol", rec: &Receipt{Status: "done", SHA256: sum, Size: ok.Size, Protocol: "v1"}, why: "protocol v1"},
		{name: "another service", rec: &Receipt{Status: "done", SHA256: sum, Size: ok.Size, API: "https://127.0.0.1:8443"}, why: "published to https://127.0.0.1:8443"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, strings.Repeat("f", i+1)+".ply")
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			if !tt.noRecp {
				if err := WriteReceipt(ReceiptPath(p), *tt.rec); err != nil {
					t.Fatal(err)
				}
			}
			if tt.edit != nil {
				if err := os.WriteFile(p, tt.edit, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ev, err := Check(context.Background(), p, svc)
			if tt.noRecp {
				if !errors.Is(err, ErrNoReceipt) {
					t.Fatalf("Check = %v, want ErrNoReceipt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Done != tt.done || !strings.Contains(ev.Why, tt.why) {
				t.Errorf("Check = done %v why %q; want done %v why ~%q", ev.Done, ev.Why, tt.done, tt.why)
			}
			if ev.Done && (ev.SHA256 != sum || ev.Size != ok.Size || ev.ModTime.IsZero()) {
				t.Errorf("evidence = %+v", ev)
			}
		})
	}
}

func hashFileBytes(b []byte) (string, error) {
	f, err := os.CreateTemp("", "hash-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	f.Write(b)
	return trustfs.Hash(context.Background(), f)
}

// writeSOGFolder writes an unbundled SOG of n splats into dir.
func writeSOGFolder(t *testing.T, dir string, n int) {
	t.Helper()
	if err := splatfile.WriteSOGFolder(dir, n); err != nil {
		t.Fatal(err)
	}
}

// TestCheckReceiptOfASOGFolder: the receipt of an unbundled SOG folder
// (beside its meta.json) names the bundle built from the folder, so it is
// weighed against that bundle's sha256 and size: evidence while the folder
// is unchanged, not once an image changed or went missing. It once compared
// them with meta.json's own bytes, so a folder was never adopted and a lost
// state directory published it again under the legacy API.
func TestCheckReceiptOfASOGFolder(t *testing.T) {
	t.Parallel()
	svc := Service{Protocol: "legacy", API: "https://api.example"}
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, dir string, images []string)
		done bool
		why  string
	}{
		{"unchanged", func(*testing.T, string, []string) {}, true, ""},
		{"an image changed", func(t *testing.T, dir string, images []string) {
			p := filepath.Join(dir, images[0])
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false, "the folder has changed since"},
		{"an image swapped for sparse gigabytes", func(t *testing.T, dir string, images []string) {
			// Sized from its stat and refused unread: the bundle's size
			// is not the receipt's.
			p := filepath.Join(dir, images[0])
			const size = 3 << 30
			if err := os.WriteFile(p, append(binary.LittleEndian.AppendUint32([]byte("RIFF"), size-8), "WEBP"...), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, size); err != nil {
				t.Fatal(err)
			}
		}, false, "the folder has changed since (its bundle is"},
		{"an image missing", func(t *testing.T, dir string, images []string) {
			if err := os.Remove(filepath.Join(dir, images[0])); err != nil {
				t.Fatal(err)
			}
		}, false, "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "room")
			writeSOGFolder(t, dir, 1000)
			meta := filepath.Join(dir, splatfile.SOGMeta)
			r, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			f, sum, err := splatfile.HashSOGFolderIn(t.Context(), r, meta)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, name := range f.Files {
				if name != splatfile.SOGMeta {
					images = append(images, name)
				}
			}
			if err := WriteReceipt(ReceiptPath(meta), Receipt{Status: "done", SHA256: sum, Size: f.Size, Protocol: "legacy", API: svc.API}); err != nil {
				t.Fatal(err)
			}
			tc.edit(t, dir, images)
			ev, err := Check(context.Background(), meta, svc)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Done != tc.done || !strings.Contains(ev.Why, tc.why) {
				t.Errorf("Check = done %v why %q; want done %v why ~%q", ev.Done, ev.Why, tc.done, tc.why)
			}
			fi, err := os.Stat(meta)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Done && (ev.SHA256 != sum || ev.Size != fi.Size() || !ev.ModTime.Equal(fi.ModTime())) {
				t.Errorf("evidence %+v: want the bundle's sha256 %s and meta.json's size %d and time (the watcher's listing)", ev, sum, fi.Size())
			}
		})
	}
}

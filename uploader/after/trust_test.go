package after

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// A watch folder is untrusted: these are issue 22's findings 1, 2 and 4 at
// the after-action stage and in the receipt reader.

// otherFS returns a folder on another filesystem than dir (/dev/shm when it
// is one), or skips: a move there must copy.
func otherFS(t *testing.T, dir string) string {
	t.Helper()
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat("/dev/shm", &b) != nil || a.Dev == b.Dev {
		t.Skip("no second filesystem (/dev/shm) to move across")
	}
	d, err := os.MkdirTemp("/dev/shm", "splatd-after-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// secretIn writes an owner-only file outside the watch folder.
func secretIn(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("token: s3cr3t-0600\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// reachable lists the files under dir whose content (links followed) is
// secret's.
func reachable(t *testing.T, dir, secret string) []string {
	t.Helper()
	want, _ := os.ReadFile(secret)
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, want) {
				found = append(found, p)
			}
		}
		return nil
	})
	return found
}

// TestTrustSidecarLinkNotCopied is finding 2: leak.splat.yaml → a secret
// outside, beside a failed leak.ply; on_failure: move across filesystems
// (a copy) must not copy the secret, nor move the link, into failure_dir.
func TestTrustSidecarLinkNotCopied(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	failed := otherFS(t, root)
	secret := secretIn(t, outside, "token")
	j := afterTestJob(t, root, "leak.ply", state.Failed)
	if err := os.Symlink(secret, filepath.Join(root, "leak.splat.yaml")); err != nil {
		t.Fatal(err)
	}
	a := New(Options{OnFailure: "move", FailureDir: failed, Receipt: true})
	fileRec, err := a.Finish(context.Background(), j)
	file := fileRec.File
	if err != nil || file != filepath.Join(failed, "leak.ply") {
		t.Fatalf("Finish = %q, %v; want the file moved", file, err)
	}
	if got := reachable(t, failed, secret); len(got) != 0 {
		t.Errorf("the secret outside is readable in failure_dir at %v", got)
	}
	if fi, err := os.Lstat(filepath.Join(root, "leak.splat.yaml")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link should stay where it was: %v, %v", fi, err)
	}
}

// TestTrustCopyKeepsMode: the copy fallback keeps the file's own mode (a
// 0600 file does not become 0644 in success_dir).
func TestTrustCopyKeepsMode(t *testing.T) {
	root := t.TempDir()
	done := otherFS(t, root)
	j := afterTestJob(t, root, "private.ply", state.Done)
	if err := os.Chmod(j.Path, 0o600); err != nil {
		t.Fatal(err)
	}
	a := New(Options{OnSuccess: "move", SuccessDir: done})
	fileRec, err := a.Finish(context.Background(), j)
	file := fileRec.File
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy %s: %v, %v; want mode 0600", file, fi, err)
	}
	if _, err := os.Lstat(j.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("source still there: %v", err)
	}
}

// TestTrustSubfolderSwappedForLink is finding 1 at the after-actions: the
// job's subfolder is replaced by a link to an outside folder holding a file
// of the same name. Neither delete nor move may touch the outside file, and
// no receipt is written there.
func TestTrustSubfolderSwappedForLink(t *testing.T) {
	for _, action := range []string{"delete", "move"} {
		t.Run(action, func(t *testing.T) {
			root, outside, done := t.TempDir(), t.TempDir(), t.TempDir()
			j := afterTestJob(t, root, "b1/x.ply", state.Done)
			victim := filepath.Join(outside, "x.ply")
			if err := os.WriteFile(victim, []byte("outside content\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(root, "b1"), filepath.Join(root, "b1.old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(root, "b1")); err != nil {
				t.Fatal(err)
			}
			a := New(Options{OnSuccess: action, SuccessDir: done, Receipt: true})
			if _, err := a.Finish(context.Background(), j); err != nil {
				t.Errorf("Finish: %v; want the action skipped (logged), not retried for ever", err)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "outside content\n" {
				t.Errorf("outside file: %q, %v; want it untouched", b, err)
			}
			if _, err := os.Lstat(ReceiptPath(victim)); err == nil {
				t.Error("a receipt was written in the outside folder")
			}
			if got := reachable(t, done, victim); len(got) != 0 {
				t.Errorf("outside file moved into success_dir: %v", got)
			}
		})
	}
}

// TestTrustReceiptNotWrittenThroughLink: a link put where the receipt goes
// is replaced, never written through.
func TestTrustReceiptNotWrittenThroughLink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "victim")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := afterTestJob(t, root, "scan.ply", state.Done)
	if err := os.Symlink(target, ReceiptPath(j.Path)); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("written through the link: %q", b)
	}
	if r := readReceipt(t, ReceiptPath(j.Path)); r.Status != "done" {
		t.Errorf("receipt = %+v", r)
	}
}

// TestTrustReceiptFIFODoesNotBlock is finding 4: a named pipe where a
// receipt would be must not block the reader (on main Check never
// returned). The 20 s guard only catches a hang; it asserts no timing.
func TestTrustReceiptFIFODoesNotBlock(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "r.ply")
	if err := os.WriteFile(file, []byte("ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(ReceiptPath(file), 0o644); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Check(context.Background(), file, Service{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ErrNoReceipt) {
			t.Errorf("Check = %v; want an error naming the pipe", err)
		}
	case <-time.After(20 * time.Second):
		// Unblock the reader so the test process can end.
		if w, err := os.OpenFile(ReceiptPath(file), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("Check blocked on a FIFO receipt")
	}
}

// TestTrustReceiptCapped: a receipt larger than ReceiptMax (or a link to
// one) is refused without reading it all.
func TestTrustReceiptCapped(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	file := filepath.Join(root, "big.ply")
	if err := os.WriteFile(file, []byte("ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte(" "), ReceiptMax+1)
	if err := os.WriteFile(ReceiptPath(file), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(context.Background(), file, Service{}); err == nil || errors.Is(err, ErrNoReceipt) {
		t.Errorf("oversized receipt: Check = %v; want refused", err)
	}
	linked := filepath.Join(root, "linked.ply")
	os.WriteFile(linked, []byte("ply\n"), 0o644)
	secret := secretIn(t, outside, "s.json")
	os.Symlink(secret, ReceiptPath(linked))
	if _, err := Check(context.Background(), linked, Service{}); err == nil || errors.Is(err, ErrNoReceipt) {
		t.Errorf("linked receipt: Check = %v; want refused", err)
	}
}

// TestTrustActsOnHeldFile: delete and move act on the file the job read
// (its recorded inode); another file renamed over its name since is left
// where it is.
func TestTrustActsOnHeldFile(t *testing.T) {
	for _, action := range []string{"delete", "move"} {
		t.Run(action, func(t *testing.T) {
			root, done := t.TempDir(), t.TempDir()
			j := afterTestJob(t, root, "scan.ply", state.Done)
			var st syscall.Stat_t
			if err := syscall.Stat(j.Path, &st); err != nil {
				t.Fatal(err)
			}
			j.Dev, j.Ino = uint64(st.Dev), st.Ino
			if err := os.WriteFile(j.Path+".new", []byte("new version\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(j.Path+".new", j.Path); err != nil {
				t.Fatal(err)
			}
			if _, err := New(Options{OnSuccess: action, SuccessDir: done}).Finish(context.Background(), j); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if b, err := os.ReadFile(j.Path); err != nil || string(b) != "new version\n" {
				t.Errorf("the new version: %q, %v; want left in place", b, err)
			}
			if ents, _ := os.ReadDir(done); len(ents) != 0 {
				t.Errorf("success_dir holds %v", ents)
			}
		})
	}
}

package after

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// peerLooks is a fleet peer's lookup for j's content, as the daemon's
// Peers.Receipt makes it (cmd/internal/daemon peerReceipt): the
// receipt beside the file, else, the file gone and the fleet moving what
// it publishes, the one under dest. sha256 "" is a job that never read the
// file. It returns the splat the evidence names, and where it was read.
func peerLooks(root, file, dest, sha256 string, size int64) (splat, at string) {
	svc := Service{Protocol: "v1"}
	r, why, err := PeerEvidence(nil, root, file, sha256, size, svc)
	if err == nil && why == "" {
		return r.Splat.ID, ReceiptPath(file)
	}
	if _, serr := new(trustfs.FS).Lstat(root, file); serr == nil || dest == "" {
		return "", ""
	}
	r, at, why, err = MovedPeerEvidence(nil, root, file, dest, sha256, size, svc)
	if err != nil || why != "" {
		return "", ""
	}
	return r.Splat.ID, at
}

// TestReceiptIsThereWhenTheFileLeaves is the fleet's old gap: Finish moved
// or deleted the file a moment before it wrote the receipt, and a peer that
// looked in between found neither, failing its job as gone or replaying
// complete. At the instant the file's name is removed (removeSource, seen
// from inside it, right after the removal), a peer's lookup must already
// find the receipt that proves the content published: beside the deleted
// file, or at the moved file's target (which, for a SOG folder, the
// meta.json reaches last). Not parallel: it replaces removeSource.
func TestReceiptIsThereWhenTheFileLeaves(t *testing.T) {
	for _, tt := range []struct {
		name, onSuccess, rel string
		want                 string // the receipt's file, under dest ("" for beside the source)
	}{
		{"move", "move", "rig/scan.ply", "rig/scan.ply"},
		{"move to a numbered name", "move", "rig/taken.ply", "rig/taken.1.ply"},
		{"delete", "delete", "rig/scan.ply", ""},
		{"move a SOG folder", "move", "rig/room/meta.json", "rig/room/meta.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root, dest := t.TempDir(), t.TempDir()
			var j state.Job
			if filepath.Base(tt.rel) == splatfile.SOGMeta {
				writeSOGFolder(t, filepath.Join(root, filepath.Dir(tt.rel)), 1000)
				j = afterTestJob(t, root, "unused.ply", state.Done)
				j.Path = filepath.Join(root, tt.rel)
				fi, err := os.Stat(j.Path)
				if err != nil {
					t.Fatal(err)
				}
				j.Size = fi.Size()
			} else {
				j = afterTestJob(t, root, tt.rel, state.Done)
			}
			j.Protocol = state.ProtocolV1
			if tt.name == "move to a numbered name" {
				taken := filepath.Join(dest, tt.rel)
				if err := os.MkdirAll(filepath.Dir(taken), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(taken, []byte("other\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := ReceiptPath(j.Path)
			if tt.want != "" {
				want = ReceiptPath(filepath.Join(dest, tt.want))
			}
			a := New(Options{OnSuccess: tt.onSuccess, SuccessDir: dest, Receipt: true, Protocol: "v1"})
			seen := 0
			removeSource = func(fsys *trustfs.FS, r, path string, id trustfs.ID) error {
				err := fsys.RemoveIf(r, path, id)
				if path != j.Path || err != nil {
					return err
				}
				seen++
				look := dest
				if tt.onSuccess != "move" {
					look = ""
				}
				for _, sha := range []string{j.SHA256, ""} { // a job that read the file, one that did not
					if splat, at := peerLooks(root, j.Path, look, sha, j.Size); splat != j.SplatID || at != want {
						t.Errorf("sha256 %q: the file has left; a peer finds splat %q at %q, want %q at %q", sha, splat, at, j.SplatID, want)
					}
				}
				return nil
			}
			t.Cleanup(func() { removeSource = (*trustfs.FS).RemoveIf })

			fileRec, err := a.Finish(context.Background(), j)

			file := fileRec.File
			if err != nil {
				t.Fatalf("Finish = %q, %v", file, err)
			}
			if seen != 1 {
				t.Fatalf("the file left %d times through removeSource, want 1", seen)
			}
			if r := readReceipt(t, want); r.Status != "done" || (tt.want != "" && r.File != file) {
				t.Errorf("receipt at %s = %+v (the file is at %s)", want, r, file)
			}
		})
	}
}

// TestMoveAfterACrashBetweenReceiptAndMove: a crash after the receipt was
// written at the move's target, before the file reached it (linkTo), after
// it was linked there, before its source was removed (removeSource), or
// once the source was removed, before the job recorded the move. Finish,
// run again as at the next start, completes the move: one file at the
// target, under the name the receipt names, one receipt there, none at the
// source, no second name, and the receipt of the older file whose name
// the move did not take left as it was.
func TestMoveAfterACrashBetweenReceiptAndMove(t *testing.T) {
	type crash struct{}
	for _, at := range []string{"before the link", "before the source is removed", "after the source was removed",
		"across filesystems, before the source is removed", "across filesystems, after the source was removed"} {
		t.Run(at, func(t *testing.T) {
			root, dest := t.TempDir(), t.TempDir()
			j := afterTestJob(t, root, "rig/scan.ply", state.Done)
			if err := os.MkdirAll(filepath.Join(dest, "rig"), 0o755); err != nil {
				t.Fatal(err)
			}
			// An older file of the same name: the move goes to scan.1.ply.
			older := filepath.Join(dest, "rig", "scan.ply")
			if err := os.WriteFile(older, []byte("older\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			olderReceipt := Receipt{File: older, Size: 6, SHA256: "0ld", Status: "done", Job: 1, Splat: ReceiptSplat{ID: "s-older"}}
			if err := WriteReceipt(ReceiptPath(older), olderReceipt); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(j.Path)
			if err != nil {
				t.Fatal(err)
			}
			id := trustfs.IDOf(fi)
			j.Dev, j.Ino = id.Dev, id.Ino
			want := filepath.Join(dest, "rig", "scan.1.ply")
			switch at {
			case "before the link":
				linkTo = func(*os.File, string) error { panic(crash{}) }
			case "before the source is removed":
				removeSource = func(*trustfs.FS, string, string, trustfs.ID) error { panic(crash{}) }
			case "across filesystems, before the source is removed": // a copy is left, not a second name
				linkTo = func(*os.File, string) error { return syscall.EXDEV }
				removeSource = func(*trustfs.FS, string, string, trustfs.ID) error { panic(crash{}) }
			case "across filesystems, after the source was removed": // the copy's mark is left
				linkTo = func(*os.File, string) error { return syscall.EXDEV }
				fallthrough
			default:
				removeSource = func(fsys *trustfs.FS, r, p string, id trustfs.ID) error {
					if err := fsys.RemoveIf(r, p, id); err != nil {
						return err
					}
					panic(crash{})
				}
			}
			t.Cleanup(func() { linkTo, removeSource = linkOpen, (*trustfs.FS).RemoveIf })
			a := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Protocol: "v1"})
			func() {
				defer func() {
					if r := recover(); r != (crash{}) {
						panic(r)
					}
				}()
				a.Finish(context.Background(), j)
				t.Fatal("no crash")
			}()
			// At the crash, the evidence is already where the file goes.
			if r := readReceipt(t, ReceiptPath(want)); r.File != want || r.Status != "done" {
				t.Fatalf("receipt at the crash = %+v", r)
			}

			linkTo, removeSource = linkOpen, (*trustfs.FS).RemoveIf // the restart
			if strings.HasPrefix(at, "across") {
				linkTo = func(*os.File, string) error { return syscall.EXDEV }
			}
			fileRec, err := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Protocol: "v1"}).Finish(context.Background(), j)
			file := fileRec.File
			if err != nil || file != want {
				t.Fatalf("Finish after the crash = %q, %v; want %q", file, err, want)
			}
			if _, err := os.Stat(j.Path); !os.IsNotExist(err) {
				t.Errorf("the source is still there: %v", err)
			}
			if b, err := os.ReadFile(want); err != nil || string(b) != "ply\n" {
				t.Errorf("moved file: %q, %v", b, err)
			}
			if r := readReceipt(t, ReceiptPath(want)); r.File != want || r.Status != "done" || r.Splat.ID != j.SplatID {
				t.Errorf("receipt = %+v", r)
			}
			ents, err := os.ReadDir(filepath.Join(dest, "rig"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if r := readReceipt(t, ReceiptPath(older)); r != olderReceipt {
				t.Errorf("the older file's receipt is now %+v", r)
			}
			if len(names) != 4 { // scan.ply and its receipt (older), scan.1.ply and its receipt
				t.Errorf("success_dir holds %q, want the older file, the moved one and its receipt", names)
			}
			if _, err := os.Stat(ReceiptPath(j.Path)); !os.IsNotExist(err) {
				t.Errorf("a receipt at the source: %v", err)
			}
		})
	}
}

// TestNoReceiptLeftWhereAVanishedFileNeverWent: a failed job's file that
// goes away while it is being moved to failure_dir (after the receipt was
// written at the target, before the file was linked there) leaves no
// receipt there, as a failed file gone before the move leaves none.
func TestNoReceiptLeftWhereAVanishedFileNeverWent(t *testing.T) {
	root, failed := t.TempDir(), t.TempDir()
	j := afterTestJob(t, root, "bad.ply", state.Failed)
	linkTo = func(f *os.File, dst string) error {
		if err := os.Remove(j.Path); err != nil { // its owner removes it
			t.Error(err)
		}
		return linkOpen(f, dst)
	}
	t.Cleanup(func() { linkTo = linkOpen })
	if _, err := New(Options{Receipt: true, OnFailure: "move", FailureDir: failed}).Finish(context.Background(), j); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if left := names(t, failed); len(left) != 0 {
		t.Errorf("failure_dir holds %q, want nothing", left)
	}
	if _, err := os.Stat(ReceiptPath(j.Path)); !os.IsNotExist(err) {
		t.Errorf("receipt beside the file gone: %v", err)
	}
}

// TestMoveAcrossFilesystemsFoundAgain: a file copied to success_dir on
// another filesystem (a new inode) is found again by a second Finish (a
// crash after the move, before the job recorded it) by the receipt written
// there for its job: not taken for an older file of its name there, nor
// for another job's copy of the same bytes and time, whose receipts stay as
// they were, and not copied twice.
func TestMoveAcrossFilesystemsFoundAgain(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	j, _ := heldJob(t, root, "scan.ply")
	// An older file of the same name.
	older := filepath.Join(dest, "scan.ply")
	olderReceipt := fileWithReceipt(t, older, "older\n", Receipt{SHA256: "0ld", Job: 1, Splat: ReceiptSplat{ID: "s-older"}})
	// A copy of the same bytes and time (cp -p) that another job published:
	// its receipt says so.
	same := filepath.Join(dest, "scan.1.ply")
	sameReceipt := fileWithReceipt(t, same, "ply\n", Receipt{SHA256: "abc", Job: 2, Splat: ReceiptSplat{ID: "s-same"}})
	if err := os.Chtimes(same, time.Time{}, j.ModTime); err != nil {
		t.Fatal(err)
	}
	linkTo = func(*os.File, string) error { return syscall.EXDEV }
	t.Cleanup(func() { linkTo = linkOpen })
	a := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Protocol: "v1"})
	want := filepath.Join(dest, "scan.2.ply")
	for run := range 2 {
		fileRec, err := a.Finish(context.Background(), j)
		file := fileRec.File
		if err != nil || file != want {
			t.Fatalf("Finish #%d = %q, %v; want %q", run+1, file, err, want)
		}
	}
	if got := names(t, dest); len(got) != 6 { // the three files and their receipts, no mark
		t.Errorf("success_dir holds %q", got)
	}
	if r := readReceipt(t, ReceiptPath(older)); r != olderReceipt {
		t.Errorf("the older file's receipt is now %+v", r)
	}
	if r := readReceipt(t, ReceiptPath(same)); r != sameReceipt {
		t.Errorf("the other job's copy's receipt is now %+v", r)
	}
	if gi, err := os.Stat(want); err != nil || !gi.ModTime().Equal(j.ModTime) {
		t.Errorf("the copy's time: %v, %v; want %v", gi, err, j.ModTime)
	}
}

// crossFS makes every move of the test copy, as across filesystems.
func crossFS(t *testing.T) {
	linkTo = func(*os.File, string) error { return syscall.EXDEV }
	t.Cleanup(func() { linkTo = linkOpen })
}

// markFor links a copy mark for src's file (as a crash between the copy's
// link and the removal of its source leaves it) to p.
func markFor(t *testing.T, src, p string) {
	t.Helper()
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, copyMark(p, trustfs.IDOf(fi))); err != nil {
		t.Fatal(err)
	}
}

// TestMoveKeepsAFileMarkedForAReusedInode: a copy's mark names its source
// by inode, and a source removed frees its inode for a new file. A file in
// success_dir whose mark names the inode the job's file now has, but which
// is not a copy of it (another size and time, another job's receipt), was
// left by an older move: it stays, and the file moves beside it.
func TestMoveKeepsAFileMarkedForAReusedInode(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	crossFS(t)
	j, _ := heldJob(t, root, "scan.ply")
	older := filepath.Join(dest, "scan.ply")
	olderReceipt := fileWithReceipt(t, older, "an older scan\n", Receipt{SHA256: "0ld", Job: 1, Splat: ReceiptSplat{ID: "s-older"}})
	markFor(t, j.Path, older)
	fileRec, err := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true}).Finish(context.Background(), j)
	file := fileRec.File
	if want := filepath.Join(dest, "scan.1.ply"); err != nil || file != want {
		t.Fatalf("Finish = %q, %v; want %q", file, err, want)
	}
	if b, err := os.ReadFile(older); err != nil || string(b) != "an older scan\n" {
		t.Errorf("the older file: %q, %v", b, err)
	}
	if r := readReceipt(t, ReceiptPath(older)); r != olderReceipt {
		t.Errorf("the older file's receipt is now %+v", r)
	}
}

// TestMoveGoneFileNotFoundInAnUnlinkedMark: a mark left by a copy a crash
// stopped mid-way, whose source then went away (its owner removed it), is
// linked to nothing: the job's file is not taken for another file there
// (the Finish says it is gone), and the mark is removed.
func TestMoveGoneFileNotFoundInAnUnlinkedMark(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	crossFS(t)
	j, id := heldJob(t, root, "scan.ply")
	other := filepath.Join(dest, "scan.ply")
	otherReceipt := fileWithReceipt(t, other, "another\n", Receipt{SHA256: "0th", Job: 99, Splat: ReceiptSplat{ID: "s-other"}})
	mark := copyMark(other, id)
	if err := os.WriteFile(mark, []byte("pl"), 0o600); err != nil { // half a copy
		t.Fatal(err)
	}
	if err := os.Remove(j.Path); err != nil {
		t.Fatal(err)
	}
	fileRec, err := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true}).Finish(context.Background(), j)
	file := fileRec.File
	if file == other || !errors.Is(err, errFileGone) {
		t.Errorf("Finish = %q, %v; want the file gone, not taken for %s", file, err, other)
	}
	if r := readReceipt(t, ReceiptPath(other)); r != otherReceipt {
		t.Errorf("the other file's receipt is now %+v", r)
	}
	if _, err := os.Lstat(mark); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unlinked mark is still there: %v", err)
	}
}

// TestMoveAcrossFilesystemsLongName: the copy's mark does not grow with the
// file's name: a name of 240 bytes (its receipt's, 251) moves as it would
// on one filesystem.
func TestMoveAcrossFilesystemsLongName(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	crossFS(t)
	name := strings.Repeat("n", 236) + ".ply"
	j := afterTestJob(t, root, name, state.Done)
	fileRec, err := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true}).Finish(context.Background(), j)
	file := fileRec.File
	if want := filepath.Join(dest, name); err != nil || file != want {
		t.Fatalf("Finish = %q, %v; want %q", file, err, want)
	}
	if got := names(t, dest); len(got) != 2 {
		t.Errorf("success_dir holds %q, want the file and its receipt", got)
	}
}

// heldJob is afterTestJob with the file's ID and time recorded, as the
// daemon records them when it reads the file.
func heldJob(t *testing.T, root, rel string) (state.Job, trustfs.ID) {
	t.Helper()
	j := afterTestJob(t, root, rel, state.Done)
	fi, err := os.Stat(j.Path)
	if err != nil {
		t.Fatal(err)
	}
	id := trustfs.IDOf(fi)
	j.Dev, j.Ino, j.ModTime = id.Dev, id.Ino, fi.ModTime()
	return j, id
}

// fileWithReceipt writes content at path and r as its receipt (its File
// and Size set here), and returns r.
func fileWithReceipt(t *testing.T, path, content string, r Receipt) Receipt {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	r.File, r.Size, r.Status = path, int64(len(content)), "done"
	if err := WriteReceipt(ReceiptPath(path), r); err != nil {
		t.Fatal(err)
	}
	return r
}

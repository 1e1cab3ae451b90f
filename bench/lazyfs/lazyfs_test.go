package lazyfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mounted mounts a file system over a fresh folder, or skips the test
// where FUSE cannot be mounted (not root, no /dev/fuse).
func mounted(t *testing.T, m *Machine, name string) *FS {
	t.Helper()
	dir := t.TempDir()
	f, err := New(m, name, filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Mount(); err != nil {
		t.Skipf("FUSE not usable here: %v", err)
	}
	t.Cleanup(func() { f.Unmount() })
	return f
}

func write(t *testing.T, p, data string, sync bool) {
	t.Helper()
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, p string) {
	t.Helper()
	d, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func dev(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(fi.Sys().(*syscall.Stat_t).Dev)
}

// cut cuts the power, unmounts, applies and remounts.
func cut(t *testing.T, m *Machine, f *FS) Dropped {
	t.Helper()
	m.CutNow("test")
	m.Release()
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	dr, err := f.Apply()
	if err != nil {
		t.Fatal(err)
	}
	m.PowerOn()
	if err := f.Mount(); err != nil {
		t.Fatal(err)
	}
	return dr
}

func TestCutKeepsOnlyWhatWasSynced(t *testing.T) {
	m := NewMachine()
	f := mounted(t, m, "a")
	mnt := f.Mountpoint()
	if err := os.Mkdir(filepath.Join(mnt, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	in := filepath.Join(mnt, "in")
	write(t, filepath.Join(in, "synced"), "one", true)
	write(t, filepath.Join(in, "nodata"), "two", false)
	write(t, filepath.Join(in, "renamed"), "three", true)
	syncDir(t, in)
	keptIno := ino(t, filepath.Join(in, "synced"))
	devBefore := dev(t, mnt)

	write(t, filepath.Join(in, "noname"), "four", true) // its folder is not fsynced again
	write(t, filepath.Join(in, "synced"), "ONE more", false)
	if err := os.Rename(filepath.Join(in, "renamed"), filepath.Join(in, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(mnt, "newdir", "x"), "five", true)
	syncDir(t, filepath.Join(mnt, "newdir")) // its own entry in mnt is not durable

	dr := cut(t, m, f)
	t.Logf("dropped: %+v", dr)
	want := map[string]string{"in/synced": "one", "in/nodata": "", "in/renamed": "three"}
	for rel, data := range want {
		b, err := os.ReadFile(filepath.Join(mnt, rel))
		if err != nil {
			t.Errorf("%s after the cut: %v", rel, err)
			continue
		}
		if string(b) != data {
			t.Errorf("%s after the cut = %q, want %q", rel, b, data)
		}
	}
	for _, rel := range []string{"in/noname", "in/moved", "newdir"} {
		if _, err := os.Lstat(filepath.Join(mnt, rel)); !os.IsNotExist(err) {
			t.Errorf("%s after the cut: %v, want gone", rel, err)
		}
	}
	t.Logf("st_dev %d before the remount, %d after", devBefore, dev(t, mnt))
	if got := ino(t, filepath.Join(in, "synced")); got != keptIno {
		t.Errorf("inode number %d after the cut, %d before", got, keptIno)
	}
	if len(dr.Lost) != 4 || len(dr.Revived) != 1 || len(dr.Reverted) != 2 {
		t.Errorf("dropped %+v, want 4 lost (in/noname, in/moved, newdir, newdir/x), 1 revived (in/renamed), 2 reverted (in/synced, in/nodata)", dr)
	}
}

func TestLinkAndUnlinkNeedTheirFolders(t *testing.T) {
	m := NewMachine()
	f := mounted(t, m, "a")
	mnt := f.Mountpoint()
	for _, d := range []string{"src", "dst"} {
		if err := os.Mkdir(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, mnt)
	write(t, filepath.Join(mnt, "src", "f"), "data", true)
	syncDir(t, filepath.Join(mnt, "src"))
	if err := os.Link(filepath.Join(mnt, "src", "f"), filepath.Join(mnt, "dst", "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "src", "f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, filepath.Join(mnt, "src")) // the unlink is durable, the link is not
	cut(t, m, f)
	for _, rel := range []string{"src/f", "dst/f"} {
		if _, err := os.Lstat(filepath.Join(mnt, rel)); !os.IsNotExist(err) {
			t.Errorf("%s after the cut: %v, want gone (the file is lost)", rel, err)
		}
	}
}

func TestCutStopsOperations(t *testing.T) {
	m := NewMachine()
	f := mounted(t, m, "a")
	mnt := f.Mountpoint()
	m.Arm(func(op Op) bool { return op.Kind == "fsync" })
	write(t, filepath.Join(mnt, "before"), "x", false)
	done := make(chan error, 1)
	go func() {
		fh, err := os.Create(filepath.Join(mnt, "f"))
		if err == nil {
			err = fh.Sync()
			fh.Close()
		}
		done <- err
	}()
	<-m.Cut()
	if p := m.CutPoint(); p != "a: fsync f" {
		t.Errorf("cut point %q, want %q", p, "a: fsync f")
	}
	m.Release()
	if err := <-done; err == nil {
		t.Error("the fsync at the cut succeeded")
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	dr, err := f.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if len(dr.Lost) != 2 {
		t.Errorf("lost %v, want before and f", dr.Lost)
	}
}

func TestWriteOnlySyncHardLinkAndSocketSurvive(t *testing.T) {
	m := NewMachine()
	f := mounted(t, m, "a")
	mnt := f.Mountpoint()
	p := filepath.Join(mnt, "wo")
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString("write-only"); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatalf("fsync of a write-only file: %v", err)
	}
	fh.Close()
	if err := os.Link(p, filepath.Join(mnt, "wo2")); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(mnt, "s.sock")
	if err := syscall.Mknod(sock, syscall.S_IFSOCK|0o600, 0); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	cut(t, m, f)
	for _, name := range []string{"wo", "wo2"} {
		if b, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || string(b) != "write-only" {
			t.Errorf("%s after the cut: %q, %v", name, b, err)
		}
	}
	if ino(t, p) != ino(t, filepath.Join(mnt, "wo2")) {
		t.Error("the two links are two files after the cut")
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket after the cut: %v, %v", fi, err)
	}
}

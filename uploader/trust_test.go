package uploader

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// A watch folder is untrusted: issue 22's findings 1 (a file or subfolder
// swapped for a link after discovery) and 7 (content replaced between hash
// and upload), through the worker pool and the simulator.

// outsidePLY writes a valid owner-only PLY outside the watch folder and
// returns its path and sha256.
func outsidePLY(t *testing.T, dir, name string, n int) (string, string) {
	t.Helper()
	var b bytes.Buffer
	if err := splatfile.WritePLY(&b, n); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o700); err != nil {
		t.Fatal(err)
	}
	return p, workerFileSHA(t, p)
}

// TestTrustLinkSwapNotPublished: after the watcher queued w/b1/x.ply, it is
// replaced by a link to a file outside; w/b2 (a subfolder) is replaced by a
// link to an outside folder holding y.ply. Neither outside file is read
// into an upload or published; each job fails saying why.
func TestTrustLinkSwapNotPublished(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{ProtocolLegacy, ProtocolV1} {
		t.Run(proto, func(t *testing.T) {
			e := newV1Env(t, apisim.Options{})
			outside := t.TempDir()
			x := e.writePLY("b1/x.ply", 10)
			y := e.writePLY("b2/y.ply", 11)
			e.enqueue(x, y)
			_, secretX := outsidePLY(t, outside, "x.ply", 40)
			os.Remove(x)
			if err := os.Symlink(filepath.Join(outside, "x.ply"), x); err != nil {
				t.Fatal(err)
			}
			outDir := filepath.Join(outside, "d")
			os.MkdirAll(outDir, 0o755)
			_, secretY := outsidePLY(t, outDir, "y.ply", 41)
			os.Rename(filepath.Dir(y), filepath.Dir(y)+".old")
			if err := os.Symlink(outDir, filepath.Dir(y)); err != nil {
				t.Fatal(err)
			}
			o := e.options(1)
			if proto == ProtocolV1 {
				o = e.v1Options(1)
			}
			if err := e.run(o); err != nil {
				t.Fatal(err)
			}
			pubs := e.sim.PublishesByHash()
			if pubs[secretX] != 0 || pubs[secretY] != 0 || len(pubs) != 0 {
				t.Errorf("published: %v; want nothing (outside x %s, y %s)", pubs, secretX[:12], secretY[:12])
			}
			if st := e.sim.Stats(); st.Uploads != 0 {
				t.Errorf("uploads = %d, want 0", st.Uploads)
			}
			for _, j := range e.jobs() {
				want := map[string]string{x: "symbolic link", y: "leads out of the watch folder"}[j.Path]
				if j.Stage != state.Failed || !strings.Contains(j.FailReason+j.LastError, want) {
					t.Errorf("%s: stage %s, reason %q; want failed saying %q", j.Path, j.Stage, j.FailReason, want)
				}
			}
		})
	}
}

// TestTrustContentReplacedBeforeUpload is finding 7: between the hash and
// the upload the content is rewritten in place with the same size and
// mtime. What is published must be what the job's sha256 says, and that
// must be the file's content.
func TestTrustContentReplacedBeforeUpload(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{ProtocolLegacy, ProtocolV1} {
		t.Run(proto, func(t *testing.T) {
			e := newV1Env(t, apisim.Options{})
			p := e.writeParts("same.ply", 3)
			e.enqueue(p)
			stale := workerFileSHA(t, p)
			o := e.options(1)
			if proto == ProtocolV1 {
				o = e.v1Options(1)
			}
			var once sync.Once
			o.workerHook = func(point string, j state.Job) error {
				if point == "commit:signed" {
					once.Do(func() { rewriteSameSizeMtime(t, p) })
				}
				return nil
			}
			if err := e.run(o); err != nil {
				t.Fatal(err)
			}
			fresh := workerFileSHA(t, p)
			if fresh == stale {
				t.Fatal("the rewrite did not change the content")
			}
			pubs := e.sim.PublishesByHash()
			if pubs[stale] != 0 || pubs[fresh] != 1 || len(pubs) != 1 {
				t.Errorf("published %v; want the current content (%s) once, the hashed-then-replaced one (%s) never", pubs, fresh[:12], stale[:12])
			}
			j := e.job(p)
			if j.Stage != state.Done || j.SHA256 != fresh {
				t.Errorf("job %s with sha256 %s; want done with the published content's %s", j.Stage, j.SHA256, fresh)
			}
		})
	}
}

// rewriteSameSizeMtime changes the last bytes of path in place (a splat's
// data, so the file stays valid) and restores its mtime.
func rewriteSameSizeMtime(t *testing.T, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := f.WriteAt([]byte{0x3f, 0x80, 0, 0}, fi.Size()-4); err != nil {
		t.Error(err)
	}
	f.Close()
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Error(err)
	}
}

// TestTrustFIFOAndFolderFail: a pipe or a folder where a queued file was
// fails its job with that reason instead of blocking a worker.
func TestTrustFIFOAndFolderFail(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	pipe := e.writePLY("pipe.ply", 10)
	dir := e.writePLY("dir.ply", 11)
	e.enqueue(pipe, dir)
	os.Remove(pipe)
	if err := mkfifo(pipe); err != nil {
		t.Skip(err)
	}
	os.Remove(dir)
	os.Mkdir(dir, 0o755)
	if err := e.run(e.options(2)); err != nil {
		t.Fatal(err)
	}
	for _, j := range e.jobs() {
		want := map[string]string{pipe: "named pipe", dir: "directory"}[j.Path]
		if j.Stage != state.Failed || !strings.Contains(j.FailReason+j.LastError, want) {
			t.Errorf("%s: stage %s, reason %q; want failed saying %q", j.Path, j.Stage, j.FailReason, want)
		}
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }

// TestTrustDeepSettingsFailJob: a sidecar whose settings nest 9998 levels
// fails its own job, naming the sidecar and the problem; the other file
// publishes and the queue stays readable. On main the job was stored with
// those settings and the store could not read it back: every claim, list
// and stats failed from then on.
func TestTrustDeepSettingsFailJob(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	deep := e.writePLY("d.ply", 10)
	ok := e.writePLY("ok.ply", 11)
	n := 9998
	if err := os.WriteFile(filepath.Join(e.files, "d.splat.yaml"), []byte("settings:\n  a: "+strings.Repeat("[", n)+strings.Repeat("]", n)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.enqueue(deep, ok)
	if err := e.run(e.options(2)); err != nil {
		t.Fatal(err)
	}
	for _, j := range e.jobs() {
		switch j.Path {
		case deep:
			if j.Stage != state.Failed || !strings.Contains(j.FailReason+j.LastError, "d.splat.yaml: settings: nested more than 32 levels deep") {
				t.Errorf("d.ply: stage %s, reason %q; want failed naming the sidecar and its depth", j.Stage, j.FailReason+j.LastError)
			}
		case ok:
			if j.Stage != state.Done {
				t.Errorf("ok.ply: stage %s (%s), want done", j.Stage, j.LastError)
			}
		}
	}
}

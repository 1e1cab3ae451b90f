package sidecar

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/splatd/splatd/state"
)

// A watch folder is untrusted: issue 22's findings 3 (memory) and 4 (a
// pipe that blocks) for sidecars and folder settings.

// resolveGuarded runs Resolve and fails the test if it does not return
// within 20 s (a hang on main; the guard asserts no timing).
func resolveGuarded(t *testing.T, defaults state.PublishParams, path, root string) (state.PublishParams, error) {
	t.Helper()
	type out struct {
		p   state.PublishParams
		err error
	}
	done := make(chan out, 1)
	go func() {
		p, err := Resolve(nil, defaults, path, root, time.Now())
		done <- out{p, err}
	}()
	select {
	case o := <-done:
		return o.p, o.err
	case <-time.After(20 * time.Second):
		t.Fatal("Resolve did not return (blocked on a pipe?)")
		return state.PublishParams{}, nil
	}
}

// unblock opens a FIFO for writing and closes it, so that a reader blocked
// on it (the code on main) returns and the test process can end.
func unblock(p string) {
	if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
}

// TestTrustSidecarFIFO is finding 4: `mkfifo r.splat.yaml` beside r.ply
// must fail r's job with the reason, not block the worker.
func TestTrustSidecarFIFO(t *testing.T) {
	for _, name := range []string{"r.splat.yaml", FolderName} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			file := filepath.Join(root, "r.ply")
			writeFile(t, file, "ply")
			fifo := filepath.Join(root, name)
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { unblock(fifo) })
			_, err := resolveGuarded(t, state.PublishParams{}, file, root)
			if err == nil || !strings.Contains(err.Error(), "named pipe") {
				t.Errorf("Resolve = %v; want an error naming the pipe", err)
			}
		})
	}
}

// TestTrustSidecarLinkOutside is finding 3 (and 1 for sidecars): a sidecar
// that is a link to a file outside (or to /dev/zero) is never read.
func TestTrustSidecarLinkOutside(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	file := filepath.Join(root, "leak.ply")
	writeFile(t, file, "ply")
	secret := filepath.Join(outside, "secret")
	writeFile(t, secret, "title: the secret\n")
	for _, target := range []string{secret, "/dev/zero"} {
		os.Remove(Path(file))
		if err := os.Symlink(target, Path(file)); err != nil {
			t.Fatal(err)
		}
		p, err := resolveGuarded(t, state.PublishParams{}, file, root)
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("sidecar → %s: Resolve = %+v, %v; want refused as a link", target, p, err)
		}
	}
}

// TestTrustSmallFilesCapped: a sidecar or folder settings file over 64 KiB
// is refused, not read whole.
func TestTrustSmallFilesCapped(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "big.ply")
	writeFile(t, file, "ply")
	writeFile(t, Path(file), "title: x\n#"+strings.Repeat("A", 64<<10)+"\n")
	if _, err := Resolve(nil, state.PublishParams{}, file, root, time.Now()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized sidecar: %v; want refused", err)
	}
}

// TestTrustTitleTemplateBounded is finding 3's folder title: a loop, a
// template call or a huge printf width is refused; anything the template
// makes is cut to the service's limits.
func TestTrustTitleTemplateBounded(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "scan.ply")
	writeFile(t, file, "ply")
	for _, title := range []string{
		"{{range 100000}}AAAAAAAAAA{{end}}",
		`{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`,
		`{{printf "%0999999d" 1}}`,
		`{{printf .Stem 1}}`, // the format from a file's name: scan.ply is harmless, but checked at call time
		`{{.ModTime.Format "MondayMondayMondayMonday" | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format | .ModTime.Format}}`,
		`{{$x := printf "%s%s" .Stem .Stem}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x = printf "%s%s" $x $x}}{{$x}}`,
	} {
		writeFile(t, filepath.Join(root, FolderName), "title: '"+title+"'\n")
		p, err := Resolve(nil, state.PublishParams{Title: "{{.Stem}}"}, file, root, time.Now())
		if err == nil && utf8.RuneCountInString(p.Title) > MaxTitle {
			t.Errorf("title %q: %d characters stored; want at most %d or refused", title, utf8.RuneCountInString(p.Title), MaxTitle)
		}
	}
	writeFile(t, filepath.Join(root, FolderName), "title: '{{range 100000}}A{{end}}'\n")
	if _, err := Resolve(nil, state.PublishParams{}, file, root, time.Now()); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("range title: %v; want refused naming range", err)
	}
	os.Remove(filepath.Join(root, FolderName))
	writeFile(t, Path(file), "title: "+strings.Repeat("T", 300)+"\ndescription: "+strings.Repeat("é", 6000)+"\n")
	p, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(p.Title); n != MaxTitle {
		t.Errorf("title cut to %d characters, want %d", n, MaxTitle)
	}
	if n := utf8.RuneCountInString(p.Description); n != MaxDescription || !utf8.ValidString(p.Description) {
		t.Errorf("description cut to %d characters (valid UTF-8 %v), want %d", n, utf8.ValidString(p.Description), MaxDescription)
	}
}

// TestTrustFolderSettingsThroughLinkedSubfolder: a subfolder replaced by a
// link to an outside folder: its .splat.yaml (outside) is not read.
func TestTrustFolderSettingsThroughLinkedSubfolder(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(outside, FolderName), "title: from outside\n")
	writeFile(t, filepath.Join(outside, "x.ply"), "ply")
	if err := os.Symlink(outside, filepath.Join(root, "sub")); err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(nil, state.PublishParams{}, filepath.Join(root, "sub", "x.ply"), root, time.Now())
	if err == nil && p.Title == "from outside" {
		t.Errorf("folder settings read from outside the watch folder: %+v", p)
	}
	if err != nil && !strings.Contains(err.Error(), "leads out") && !errors.Is(err, os.ErrNotExist) {
		t.Logf("refused: %v", err)
	}
}

// TestTrustTitleTimeMethods: the bounded .ModTime keeps what titles use.
func TestTrustTitleTimeMethods(t *testing.T) {
	mod := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	got, err := renderTitle(`{{.ModTime.Format "2006-01-02"}} {{.ModTime.Year}} {{.ModTime.UTC.Month}} {{.ModTime.Weekday}} {{.ModTime.AddDate 0 0 1 | printf "%v"}}`,
		TitleData{Stem: "s", ModTime: mod})
	want := "2026-03-04 2026 March Wednesday 2026-03-05 05:06:07 +0000 UTC"
	if err != nil || got != want {
		t.Errorf("rendered %q, %v; want %q", got, err, want)
	}
	if _, err := renderTitle(`{{.ModTime.Format "MondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMondayMonday" | .ModTime.Format | .ModTime.Format}}`,
		TitleData{ModTime: mod}); err == nil {
		t.Error("nested Format calls grew without bound")
	}
}

package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// FuzzSidecar feeds arbitrary bytes to the sidecar reader through Resolve:
// it never panics, never accepts more than trustfs.SmallMax bytes, a
// title or description it accepts is within the service's limits, and
// what it accepts is stored in a job record that reads back.
func FuzzSidecar(f *testing.F) {
	f.Add([]byte("title: Scan\ndescription: a room\nlisted: true\nformat: sog\nsettings: {camera: {fov: 60}}\n"))
	f.Add([]byte("title: ''\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("settings: &a [*a]\n"))
	f.Add([]byte("settings:\n  a: " + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + "\n"))
	f.Add([]byte("settings: {a: {1: b}, c: .nan}\n"))
	f.Add([]byte("title: " + strings.Repeat("é", 200) + "\n"))
	f.Add([]byte("\x00\xff{{"))
	f.Add([]byte("settings: {a: &a xxxxxxxx, b: [*a, *a, *a, *a]}\n"))
	root := f.TempDir()
	file := filepath.Join(root, "scan.ply")
	if err := os.WriteFile(file, []byte("ply"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(Path(file), b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Resolve(nil, state.PublishParams{Title: "{{.Stem}}"}, file, root, time.Unix(0, 0))
		if err != nil {
			return
		}
		if len(b) > trustfs.SmallMax {
			t.Fatalf("accepted a %d-byte sidecar", len(b))
		}
		checkLimits(t, p)
	})
}

// FuzzFolderSettings feeds arbitrary bytes to a folder's .splat.yaml,
// whose title is a template: rendering it is bounded, and what it makes is
// within the service's limits.
func FuzzFolderSettings(f *testing.F) {
	f.Add([]byte("title: '{{.RelDir}}/{{.Stem}}'\nlisted: false\n"))
	f.Add([]byte("title: '{{range 1000000000}}AAAAAAAAAA{{end}}'\n"))
	f.Add([]byte("title: '{{printf \"%0999999999d\" 1}}'\n"))
	f.Add([]byte("title: '{{.ModTime.Format \"2006-01-02\"}} {{if eq .Stem \"scan\"}}x{{else}}y{{end}}'\n"))
	f.Add([]byte("title: '{{define \"a\"}}{{template \"a\"}}{{end}}{{template \"a\"}}'\n"))
	f.Add([]byte("description: " + strings.Repeat("x", 6000) + "\n"))
	root := f.TempDir()
	file := filepath.Join(root, "sub", "scan.ply")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("ply"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(root, FolderName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Resolve(nil, state.PublishParams{}, file, root, time.Unix(0, 0))
		if err != nil {
			return
		}
		checkLimits(t, p)
	})
}

// FuzzTitleTemplate renders arbitrary title templates: each returns (with
// an error or a title) and none makes more than MaxTitleOutput bytes.
func FuzzTitleTemplate(f *testing.F) {
	for _, s := range []string{"{{.Stem}}", "{{range 1000}}A{{end}}", "{{printf \"%*d\" 100000000 1}}",
		"{{with .Name}}{{.}}{{end}}", "{{html (print .Dir .Dir .Dir)}}", "{{$x := .Stem}}{{$x = print $x $x}}{{$x}}",
		"{{slice .Stem 1 2}}", "{{index .Name 0}}", "{{len .Dir}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out, err := renderTitle(src, TitleData{Stem: "%9999999d", Name: "%9999999d.ply", Dir: "/d", RelDir: "."})
		if err == nil && len(out) > MaxTitleOutput {
			t.Fatalf("%q rendered %d bytes", src, len(out))
		}
	})
}

func checkLimits(t *testing.T, p state.PublishParams) {
	t.Helper()
	if n := utf8.RuneCountInString(p.Title); n > MaxTitle {
		t.Fatalf("title of %d characters", n)
	}
	if n := utf8.RuneCountInString(p.Description); n > MaxDescription {
		t.Fatalf("description of %d characters", n)
	}
	b, err := state.Job{ID: 1, Stage: state.Ready, Params: p}.Marshal()
	if err != nil {
		t.Fatalf("parameters the job record cannot hold: %v", err)
	}
	if _, err := state.Unmarshal(b); err != nil {
		t.Fatalf("a job record that does not read back: %v", err)
	}
	if len(b) > MaxSettingsBytes+32<<10 { // settings, a description of 5000 runes, a title
		t.Fatalf("a job record of %d bytes", len(b))
	}
}

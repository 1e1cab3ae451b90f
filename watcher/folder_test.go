package watcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLargeFolderOrder: a folder of more files than statAhead is handed on
// in listing order, every wanted file once, the rest stat'ed in chunks by
// visit, and a subfolder listed among its files is walked in its place.
func TestLargeFolderOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var want []string
	for i := range statAhead + 300 {
		p := filepath.Join(dir, fmt.Sprintf("f-%05d.ply", i))
		if i == statAhead+100 {
			for j := range 3 {
				sp := filepath.Join(dir, fmt.Sprintf("f-%05d-sub", i), fmt.Sprintf("s-%d.ply", j))
				if err := os.MkdirAll(filepath.Dir(sp), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(sp, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p+".splat.json", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	// The subfolder sorts right before the file whose name it extends ('-' < '.').
	sub := filepath.Join(dir, fmt.Sprintf("f-%05d-sub", statAhead+100))
	at := slices.Index(want, filepath.Join(dir, fmt.Sprintf("f-%05d.ply", statAhead+100)))
	want = slices.Insert(want, at, filepath.Join(sub, "s-0.ply"), filepath.Join(sub, "s-1.ply"), filepath.Join(sub, "s-2.ply"))

	asked, st := walkAsked(t, dir)
	if !slices.Equal(asked, want) {
		t.Fatalf("asked %d files, want %d in listing order (first difference at %d)", len(asked), len(want), firstDiff(asked, want))
	}
	if st.files != len(want) {
		t.Errorf("the scan counted %d files, want %d", st.files, len(want))
	}
}

// walkAsked walks dir as a full scan of a recursive root and returns the
// paths asked of KnownBatch (all unknown), in order, and the scan state.
func walkAsked(t *testing.T, dir string) ([]string, *scanState) {
	t.Helper()
	var asked []string
	w, err := New(Options{Roots: []Root{{Path: dir, Recursive: true}}, Settle: time.Hour,
		KnownBatch: func(cs []Candidate) []bool {
			for _, c := range cs {
				asked = append(asked, c.Path)
			}
			return make([]bool, len(cs))
		}})
	if err != nil {
		t.Fatal(err)
	}
	st := &scanState{dirs: make(map[string]bool)}
	if err := w.walk(w.roots[0], w.roots[0].path, st); err != nil {
		t.Fatal(err)
	}
	return asked, st
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestChooseUnknownTypes: entries a listing gave no type are stat'ed for
// it; of those, only the files the rules want by name are looked at, one
// gone since the listing is skipped, and a folder is typed as one.
func TestChooseUnknownTypes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{"a.ply", "b.txt", "z.ply"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Roots: []Root{{Path: dir, Recursive: true}}, Settle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := w.roots[0]
	d, df := openTestDir(t, dir)
	f := &folder{d: d, df: df, dir: dir, ents: []dirEntry{
		{name: "a.ply"}, {name: "b.txt"}, {name: "gone.ply"}, {name: "sub"}, {name: "z.ply", typ: typeOther},
	}}
	f.choose(r, w.tr)
	types := []fileType{typeOther, typeOther, typeUnknown, typeDir, typeOther}
	for i, e := range f.ents {
		if e.typ != types[i] {
			t.Errorf("%s: type %d, want %d", e.name, e.typ, types[i])
		}
	}
	if !slices.Equal(f.want, []int{0, 4}) || f.files != 2 {
		t.Fatalf("want %v of %d files, want [0 4] of 2", f.want, f.files)
	}
	f.prepare(r, statAhead)
	var got []string
	for _, l := range f.looks {
		got = append(got, filepath.Base(l.path)+fmt.Sprint(l.fi.Size()))
	}
	if !slices.Equal(got, []string{"a.ply5", "z.ply5"}) {
		t.Errorf("looks %v, want [a.ply5 z.ply5]", got)
	}
}

// TestReadAheadOrder: folders read ahead by the loaders, more of them than
// the window and nested, are handed on in walk order, each file once.
func TestReadAheadOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var want []string
	add := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	for i := range 3*maxAhead + 1 {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i))
		add(filepath.Join(d, "a.ply"))
		if i%5 == 0 {
			for j := range maxAhead + 2 {
				add(filepath.Join(d, "m", fmt.Sprintf("e%02d", j), "x.ply"))
			}
		}
		add(filepath.Join(d, "z.ply"))
	}
	asked, _ := walkAsked(t, dir)
	if !slices.Equal(asked, want) {
		t.Fatalf("asked %d files, want %d in walk order (first difference at %d)", len(asked), len(want), firstDiff(asked, want))
	}
}

// openTestDir opens dir as a scan does, both closed at the test's end.
func openTestDir(t *testing.T, dir string) (*os.Root, *dirFile) {
	t.Helper()
	d, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	df, err := openDir(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { df.Close() })
	return d, df
}

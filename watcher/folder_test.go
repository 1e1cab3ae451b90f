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
	if !slices.Equal(asked, want) {
		t.Fatalf("asked %d files, want %d in listing order (first difference at %d)", len(asked), len(want), firstDiff(asked, want))
	}
	if st.files != len(want) {
		t.Errorf("the scan counted %d files, want %d", st.files, len(want))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

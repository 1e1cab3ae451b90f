package watcher

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSettlingAndRootStates: a file seen but not yet quiet is listed with
// its size; a root scanned well has its scan time, a missing one its error.
func TestSettlingAndRootStates(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone")
	w, err := New(Options{Roots: []Root{{Path: dir}, {Path: gone}}, Settle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "big.ply")
	if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	var r *root
	for _, x := range w.roots {
		if x.Path == dir {
			r = x
		}
		w.scanRoot(context.Background(), x)
	}
	w.tr.observe(r, p, fi, true)
	s := w.Settling()
	if len(s) != 1 || s[0].Path != p || s[0].Root != dir || s[0].Size != 4096 || s[0].Since.IsZero() || !s[0].Changed.Equal(fi.ModTime()) {
		t.Errorf("Settling() = %+v", s)
	}
	for _, st := range w.RootStates() {
		switch st.Path {
		case dir:
			if st.LastScan.IsZero() || st.Error != "" {
				t.Errorf("scanned root: %+v", st)
			}
		case gone:
			if !st.LastScan.IsZero() || st.Error == "" {
				t.Errorf("missing root: %+v", st)
			}
		}
	}
}

package watcher

import (
	"os"
	"path/filepath"
	"testing"
)

// SetRoots on a running watcher: files in the new root are found (already
// there and new ones), the old root is no longer watched.
func TestSetRootsWhileRunning(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	h.write("a.ply", "a")
	if c := h.next(); c.Path != h.path("a.ply") {
		t.Fatalf("first candidate %s", c.Path)
	}
	newDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(newDir, "there.ply"), []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.w.SetRoots([]Root{{Path: "", Recursive: true}}); err == nil {
		t.Fatal("an empty root path was accepted")
	}
	if err := h.w.SetRoots([]Root{{Path: newDir, Recursive: true}}); err != nil {
		t.Fatal(err)
	}
	if c := h.next(); c.Path != filepath.Join(newDir, "there.ply") || c.Root != newDir {
		t.Fatalf("after SetRoots: %+v, want there.ply under the new root", c)
	}
	h.eventually("new root scanned", h.w.Healthy)
	// Written to the old root (before the sentinel in the new one): not
	// reported, since the events are handled in order.
	h.write("old.ply", "o")
	sentinel := filepath.Join(newDir, "new.ply")
	if err := os.WriteFile(sentinel, []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.until(sentinel) {
		if c.Path == h.path("old.ply") {
			t.Fatalf("a file in the removed root was reported: %+v", c)
		}
	}
}

// Rediscover reports an unchanged file again, without an event.
func TestRediscover(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	p := h.write("a.ply", "a")
	if c := h.next(); c.Path != p {
		t.Fatalf("first candidate %s", c.Path)
	}
	h.w.Rediscover(p)
	if c := h.next(); c.Path != p {
		t.Fatalf("after Rediscover: %s, want %s again", c.Path, p)
	}
}

package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// mappedRSS is the resident size of the mapping of path in this process.
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	var rss int64
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			in = len(f) >= 6 && f[5] == path
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss += kb << 10
		}
	}
	return rss
}

// TestReleaseMappedPages: pages that reading every job mapped in are
// released shortly after, while the file stays readable.
func TestReleaseMappedPages(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{NoSync: true})
	var cs []Candidate
	for i := range 20000 {
		cs = append(cs, cand(fmt.Sprintf("/inbox/folder-%03d/a-long-file-name-%05d.ply", i%100, i), int64(1000+i), int64(i)))
	}
	if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the releaser back while every page is read, then let it go.
	s.db.release.close(time.Minute)
	jobs, err := s.List(Filter{})
	if err != nil || len(jobs) != len(cs) {
		t.Fatalf("list: %d jobs, %v", len(jobs), err)
	}
	touched := mappedRSS(t, path)
	if touched < 4<<20 {
		t.Fatalf("reading every job left %d of %d bytes mapped: the test reads too little", touched, fi.Size())
	}
	s.db.release = newReleaser(s.db.DB, func(fn func(*bolt.Tx) error) error { return s.db.guarded("a read", s.db.DB.View, fn) })
	if !s.Known(cs[0].Path, cs[0].Size, cs[0].ModTime) {
		t.Fatal("the first file is not known")
	}
	deadline := time.Now().Add(time.Minute)
	for mappedRSS(t, path) > touched/8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes still mapped a minute after the last read", mappedRSS(t, path), fi.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if jobs, err := s.List(Filter{}); err != nil || len(jobs) != len(cs) {
		t.Fatalf("list after the release: %d jobs, %v", len(jobs), err)
	}
}

// TestReleaseOnACutFile: a state file cut short under the open store makes
// the releaser's read fault; that is the store's damage, not a crash, and
// Close still returns.
func TestReleaseOnACutFile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, s, cand("/inbox/a.ply", 10, 1), true)
	if err := os.Truncate(filepath.Join(dir, FileName), 0); err != nil {
		t.Fatal(err)
	}
	s.db.release.touched()
	deadline := time.Now().Add(time.Minute)
	for s.Damaged() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the cut file was never found damaged")
		}
		s.db.release.touched()
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close did not return on a damaged store")
	}
}

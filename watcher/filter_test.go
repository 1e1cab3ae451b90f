package watcher

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// syncBuffer is a log sink the watcher's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) count(sub string) int { return strings.Count(s.String(), sub) }

// sized writes a sentinel of n bytes and returns what was emitted before it.
func (h *harness) sizedSentinel(n int) []Candidate {
	h.t.Helper()
	p := h.write(fmt.Sprintf("zz-sentinel-%d.ply", time.Now().UnixNano()), strings.Repeat("s", n))
	got := h.until(p)
	return got[:len(got)-1]
}

func basenames(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path[strings.LastIndexByte(c.Path, '/')+1:])
	}
	slices.Sort(out)
	return out
}

// TestSizeBoundsSkipWithOneLogLine: files outside min_size/max_size are not
// candidates and are logged once per version, rescans or not; a file that
// grows into the bounds is emitted.
func TestSizeBoundsSkipWithOneLogLine(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	// Poll mode: every candidate is found by a full scan, so a sentinel's
	// arrival proves a scan walked past the skipped files again.
	h := start(t, Options{}, Root{Mode: ModePoll, PollInterval: 20 * time.Millisecond, MinSize: 10, MaxSize: 100},
		func(w *Watcher) { w.tr.log = zerolog.New(&logs) })
	small := h.write("small.ply", "tiny")
	h.write("big.ply", strings.Repeat("b", 101))
	h.write("edge-min.ply", strings.Repeat("m", 10))
	h.write("edge-max.ply", strings.Repeat("x", 100))

	if got := basenames(h.sizedSentinel(50)); !slices.Equal(got, []string{"edge-max.ply", "edge-min.ply"}) {
		t.Fatalf("emitted %q, want only the files within the bounds", got)
	}
	if n := logs.count("size bounds"); n != 2 {
		t.Fatalf("%d skip lines, want 2:\n%s", n, logs.String())
	}
	if got := h.sizedSentinel(50); len(got) != 0 {
		t.Fatalf("emitted again: %v", paths(got))
	}
	if n := logs.count("size bounds"); n != 2 {
		t.Errorf("a rescan logged the skipped files again (%d lines)", n)
	}

	h.write("small.ply", strings.Repeat("s", 20))
	if c := h.next(); c.Path != small || c.Size != 20 {
		t.Errorf("grown file: got %+v", c)
	}
}

// TestSizeBoundsLeaveMetaJSONToTheBundle: an unbundled SOG folder's
// meta.json is a candidate whatever its own size: the bounds apply to the
// bundle built from the folder, which the worker pool sizes. A scan's
// listing (the dry run's) says the same.
func TestSizeBoundsLeaveMetaJSONToTheBundle(t *testing.T) {
	t.Parallel()
	bounds := Root{Mode: ModePoll, PollInterval: 20 * time.Millisecond, Recursive: true, MinSize: 10, MaxSize: 100}
	h := start(t, Options{}, bounds, nil)
	h.write("small/meta.json", "{}")
	h.write("large/meta.json", strings.Repeat(" ", 200)+"{}")
	h.write("small.ply", "tiny")
	if got := basenames(h.sizedSentinel(50)); !slices.Equal(got, []string{"meta.json", "meta.json"}) {
		t.Fatalf("emitted %q, want both meta.json (and not small.ply)", got)
	}

	bounds.Path = h.dir
	listed, err := List([]Root{bounds}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listed {
		if want := strings.HasSuffix(l.Path, ".ply") && l.Size < 10; (l.Skip != "") != want {
			t.Errorf("List: %s (%d bytes) skip %q, want skipped %v", l.Path, l.Size, l.Skip, want)
		}
	}
}

// TestMinAgeHoldsYoungFilesBack: a settled file younger than min_age (by
// mtime) waits and is emitted once old enough, without any new event.
func TestMinAgeHoldsYoungFilesBack(t *testing.T) {
	t.Parallel()
	h := start(t, Options{Settle: 20 * time.Millisecond}, Root{MinAge: time.Hour}, nil)
	old := time.Now().Add(-2 * time.Hour)
	young := h.write("young.ply", "y")
	aged := h.write("aged.ply", "a")
	if err := os.Chtimes(aged, old, old); err != nil {
		t.Fatal(err)
	}
	sentinel := h.write("zz-sentinel.ply", "s")
	if err := os.Chtimes(sentinel, old, old); err != nil {
		t.Fatal(err)
	}
	if got := basenames(h.until(sentinel)); !slices.Equal(got, []string{"aged.ply", "zz-sentinel.ply"}) {
		t.Fatalf("emitted %q, want the young file held back", got)
	}
	// Aging it (as time would) makes it a candidate.
	if err := os.Chtimes(young, old, old); err != nil {
		t.Fatal(err)
	}
	if c := h.next(); c.Path != young {
		t.Errorf("got %+v, want %s once old enough", c, young)
	}
}

func TestMinAgeRecheckedWithoutEvents(t *testing.T) {
	t.Parallel()
	const minAge = 300 * time.Millisecond
	h := start(t, Options{Settle: 10 * time.Millisecond}, Root{MinAge: minAge}, nil)
	p := h.write("scan.ply", "data")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	c := h.next()
	// Only a lower bound: the emission may be late on a slow machine, never early.
	if c.Path != p || time.Now().Before(fi.ModTime().Add(minAge)) {
		t.Errorf("got %+v at %v, before mtime %v + min_age", c, time.Now(), fi.ModTime())
	}
}

// TestOwnFilesAreNeverCandidates: sidecars, folder settings and receipts
// are not splats even when include matches everything.
func TestOwnFilesAreNeverCandidates(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Include: []string{"*"}, Exclude: []string{}}, nil)
	h.write(".splat.yaml", "title: x\n")
	h.write("scan.splat.yaml", "title: x\n")
	h.write("scan.ply.splat.json", "{}\n")
	h.write("SCAN.SPLAT.JSON", "{}\n")
	if got := h.sentinel(); len(got) != 0 {
		t.Errorf("emitted %v", paths(got))
	}
}

func TestBadBoundsRefused(t *testing.T) {
	t.Parallel()
	for _, r := range []Root{{Path: "/x", MinSize: 10, MaxSize: 5}, {Path: "/x", MinAge: -time.Second}} {
		if _, err := New(Options{Roots: []Root{r}}); err == nil {
			t.Errorf("New(%+v) accepted", r)
		}
	}
}

// TestPatternIsFilepathMatch: the fast shapes of a compiled pattern answer
// as filepath.Match does for every base name.
func TestPatternIsFilepathMatch(t *testing.T) {
	t.Parallel()
	patterns := append(append([]string{"*", "*.", ".", "a*", "*a*", "scan-?.ply", "[ab]*.ply", `\*.ply`, "meta.json", "take*", "*~"}, DefaultInclude...), DefaultExclude...)
	names := []string{"", ".", "..", ".hidden", "a.ply", "scan-1.ply", "scan-12.ply", "*.ply", "meta.json", "xmeta.json", "take-001.ply", "f~", "~", "a.part", ".ply", "b.tmp.ply", "é.ply"}
	for _, p := range patterns {
		for _, n := range names {
			want, _ := filepath.Match(p, n)
			if got := compilePattern(p).match(n); got != want {
				t.Errorf("pattern %q on %q: %v, filepath.Match says %v", p, n, got, want)
			}
		}
	}
}

// TestListOwnFilesSilent: a dry-run listing gives a reason for a file the
// rules leave out, and none for splatd's own files (a sidecar, a receipt,
// a fleet announcement), which are never candidates.
func TestListOwnFilesSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{"a.ply", "notes.txt", "a.ply.splat.json", "b.splatd-peer"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(Options{Roots: []Root{{Path: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := w.listRoot(w.roots[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]string{}
	for _, l := range listed {
		if l.Skip != "" {
			skipped[filepath.Base(l.Path)] = l.Skip
		}
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped["notes.txt"], "not matched") {
		t.Errorf("skipped %v, want only notes.txt, not matched", skipped)
	}
}

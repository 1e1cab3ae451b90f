package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// realStore is a state file made through the queue's own API: finished
// jobs (some pruned to tombstones), jobs in flight, queued ones and a
// canceled one, large enough that every bucket spans pages. It is built
// once; each test damages a copy.
var realStore = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "queue-real-")
	if err != nil {
		return "", err
	}
	clk := newClock()
	s, err := Open(dir, Options{NoSync: true, Now: clk.Now, Retention: Retention{MaxFinished: 150, MaxAge: -1}, PruneEvery: 50})
	if err != nil {
		return "", err
	}
	defer s.Close()
	var cs []Candidate
	for i := range 400 {
		cs = append(cs, cand(fmt.Sprintf("/srv/captures/session-%03d/scan-%04d-%s.ply", i/40, i, strings.Repeat("x", 40)), int64(1000+i), 1700000000))
	}
	if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
		return "", err
	}
	now := clk.Now()
	step := func(j state.Job, to state.Stage, edit func(*state.Job)) (state.Job, error) {
		from := j.Stage
		if err := j.Move(to, now); err != nil {
			return j, err
		}
		j.NextAttempt = now
		if edit != nil {
			edit(&j)
		}
		return s.Commit(j, from)
	}
	for i := range 330 {
		j, ok, err := s.Claim(now)
		if err != nil || !ok {
			return "", fmt.Errorf("claim %d: %v %v", i, ok, err)
		}
		sha := fmt.Sprintf("%064x", i)
		if j, err = step(j, state.Ready, func(j *state.Job) { j.SHA256 = sha }); err != nil {
			return "", err
		}
		last := state.Done
		if i >= 300 {
			last = state.Uploaded // in flight
		}
		for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
			if j, err = step(j, to, func(j *state.Job) { j.SplatID = "splat-" + sha[56:] }); err != nil {
				return "", err
			}
			if to == last {
				break
			}
		}
		if last == state.Done {
			s.Release(j.ID) // in flight ones stay held: Claim would hand them out first
		}
	}
	if _, err := s.Cancel(400); err != nil {
		return "", err
	}
	return dir, s.db.Sync()
})

// storeCopy copies the real store into a new folder.
func storeCopy(t *testing.T) string {
	t.Helper()
	src, err := realStore()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, FileName))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// layout is where the buckets of the state file in dir lie: each
// bucket's pages with their flags, and the meta page in force.
type layout struct {
	meta  boltMeta
	pages map[string][]pageAt
}

type pageAt struct {
	id    uint64
	flags uint16
}

func layoutOf(t *testing.T, dir string) layout {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	pf, err := openPages(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	l := layout{meta: pf.meta, pages: map[string][]pageAt{}}
	w := &walker{pf: pf, page: func(b []string, id uint64, fl uint16) {
		k := strings.Join(b, "/")
		l.pages[k] = append(l.pages[k], pageAt{id, fl})
	}}
	w.walk()
	if w.probs.n() > 0 {
		t.Fatalf("the real store is damaged already: %v", w.probs.list)
	}
	return l
}

// pageOf is the first page of bucket with flags fl.
func (l layout) pageOf(t *testing.T, bucket string, fl uint16) uint64 {
	t.Helper()
	for _, p := range l.pages[bucket] {
		if p.flags == fl {
			return p.id
		}
	}
	t.Fatalf("bucket %s has no page with flags %#x: %v", bucket, fl, l.pages[bucket])
	return 0
}

// writePage overwrites page id of the state file in dir with b (zeros:
// nil), padded to the page.
func writePage(t *testing.T, dir string, l layout, id uint64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, l.meta.pageSize)
	copy(page, b)
	if _, err := f.WriteAt(page, int64(id)*int64(l.meta.pageSize)); err != nil {
		t.Fatal(err)
	}
}

// realJobs is the number of job records in the real store.
func realJobs(t *testing.T) int {
	t.Helper()
	src, err := realStore()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Check(src, time.Second)
	if err != nil || rep.Damaged() {
		t.Fatal(err, rep.Problems)
	}
	return rep.Jobs
}

// damages are the table of damaged copies: each function damages the state
// file in dir; allJobs says every job record survives it.
var damages = []struct {
	name    string
	damage  func(t *testing.T, dir string, l layout)
	allJobs bool
}{
	{"cut in half", func(t *testing.T, dir string, l layout) {
		// Half of the pages in use: the file itself may be larger (bbolt
		// grows it ahead of its high-water mark).
		used := int64(l.meta.hwm) * int64(l.meta.pageSize)
		if err := os.Truncate(filepath.Join(dir, FileName), used/2); err != nil {
			t.Fatal(err)
		}
	}, false},
	{"zeroed branch page", func(t *testing.T, dir string, l layout) {
		writePage(t, dir, l, l.pageOf(t, "jobs", flagBranch), nil)
	}, false},
	{"zeroed freelist page", func(t *testing.T, dir string, l layout) {
		if l.meta.freelist == noFreelist {
			t.Fatal("no freelist page")
		}
		writePage(t, dir, l, l.meta.freelist, nil)
	}, true},
	{"zeroed stages page", func(t *testing.T, dir string, l layout) {
		writePage(t, dir, l, l.pageOf(t, "stages", flagLeaf), nil)
	}, true},
	{"zeroed paths leaf", func(t *testing.T, dir string, l layout) {
		writePage(t, dir, l, l.pageOf(t, "paths", flagLeaf), nil)
	}, true},
	{"random bytes in a job leaf", func(t *testing.T, dir string, l layout) {
		id := l.pageOf(t, "jobs", flagLeaf)
		f, _ := os.ReadFile(filepath.Join(dir, FileName))
		page := bytes.Clone(f[int(id)*int(l.meta.pageSize):][:l.meta.pageSize])
		r := rand.New(rand.NewPCG(36, 1))
		for i := pageHeaderSize; i < len(page); i++ {
			page[i] = byte(r.Uint32())
		}
		writePage(t, dir, l, id, page)
	}, false},
	{"zeroed sha256 leaf", func(t *testing.T, dir string, l layout) {
		writePage(t, dir, l, l.pageOf(t, "sha256", flagLeaf), nil)
	}, true},
	{"0-byte file", func(t *testing.T, dir string, l layout) {
		if err := os.Truncate(filepath.Join(dir, FileName), 0); err != nil {
			t.Fatal(err)
		}
	}, false},
}

func TestDamagedStore(t *testing.T) {
	t.Parallel()
	total := realJobs(t)
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := storeCopy(t)
			tc.damage(t, dir, layoutOf(t, dir))
			damaged, _ := os.ReadFile(filepath.Join(dir, FileName))

			rep, err := Check(dir, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Damaged() {
				t.Fatalf("Check found nothing wrong")
			}
			t.Logf("check: %v (+%d)", rep.Problems, rep.More)

			if len(damaged) == 0 {
				// An empty file opens as a new store (the daemon says so),
				// on a copy: Open writes it.
				other := t.TempDir()
				os.WriteFile(filepath.Join(other, FileName), nil, 0o600)
				s, err := Open(other, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if s.Fresh() == "" {
					t.Error("an empty file opened as an existing store")
				}
				s.Close()
			} else {
				s, err := Open(dir, Options{})
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded on a damaged file")
				}
				var de *DamagedError
				if !errors.As(err, &de) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) || !strings.Contains(err.Error(), "splatd state recover") {
					t.Fatalf("Open: %v, want a DamagedError naming the file and the command", err)
				}
			}

			rr, err := Recover(dir, time.Second, time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("recover: %d jobs, %d unreadable, %d lost, %d tombstones, %d paths (%d dropped)", rr.Jobs, len(rr.Unreadable), len(rr.Lost), rr.Tombstones, rr.Paths, rr.DroppedPaths)
			if aside, err := os.ReadFile(rr.Aside); err != nil || !bytes.Equal(aside, damaged) {
				t.Fatalf("the damaged file is not kept aside as it was at %s: %v", rr.Aside, err)
			}
			if tc.allJobs && rr.Jobs != total {
				t.Errorf("salvaged %d jobs of %d", rr.Jobs, total)
			}
			if !tc.allJobs && len(damaged) > 0 && (rr.Jobs == total || rr.Jobs+len(rr.Lost)+len(rr.Unreadable) == 0) {
				t.Errorf("salvaged %d jobs of %d, %d lost, %d unreadable: the damage lost nothing?", rr.Jobs, total, len(rr.Lost), len(rr.Unreadable))
			}
			after, err := Check(dir, time.Second)
			if err != nil || after.Damaged() {
				t.Fatalf("the recovered file: %v %v", err, after.Problems)
			}
			s, err := Open(dir, Options{Now: newClock().Now})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			jobs, err := s.List(Filter{})
			if err != nil || len(jobs) != rr.Jobs {
				t.Fatalf("List: %d jobs, %v; want %d", len(jobs), err, rr.Jobs)
			}
			checkCounts(t, s)
			if _, _, err := s.Claim(time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnqueueBatch(context.Background(), []Candidate{cand("/srv/new.ply", 1, 1)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCheckAgreesWithBbolt: on the sound real store both checks pass.
func TestCheckAgreesWithBbolt(t *testing.T) {
	t.Parallel()
	dir := storeCopy(t)
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(dir, time.Second)
	if err != nil || rep.Damaged() || rep.Jobs == 0 {
		t.Fatalf("%v %v, %d jobs", err, rep.Problems, rep.Jobs)
	}
}

// TestPanicAtFirstUse: a page damaged under an open store (bbolt reads it
// only when a claim needs it) makes that call fail with a DamagedError,
// reported once, and every later call fail with it, without a panic.
func TestPanicAtFirstUse(t *testing.T) {
	t.Parallel()
	dir := storeCopy(t)
	reported := make(chan *DamagedError, 2)
	s := open(t, dir, Options{OnDamaged: func(e *DamagedError) { reported <- e }})
	if _, err := s.EnqueueBatch(context.Background(), []Candidate{cand("/srv/new.ply", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	l := layoutOf(t, dir) // as the last commit left it
	writePage(t, dir, l, l.pageOf(t, "due", flagLeaf), nil)
	_, _, err := s.Claim(time.Now())
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "splatd state recover") {
		t.Fatalf("Claim on a zeroed page: %v", err)
	}
	e := <-reported
	if _, err := s.Stats(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Stats after the damage: %v", err)
	}
	if s.Damaged() == nil || e.Stack == "" {
		t.Fatalf("Damaged() = %v, stack %q", s.Damaged(), e.Stack)
	}
	select {
	case e := <-reported:
		t.Fatalf("reported twice: %v", e)
	default:
	}
}

// BenchmarkCheck is what Check (full, as `splatd state check` runs it, and
// bounded, as every Open over boundedOver does) costs on the state of a
// daemon that finished 1,000 and 1,000,000 jobs (SeedTombstones: what
// retention leaves of them), with the file's size: go test -run '^$'
// -bench Check -benchtime 3x ./queue/
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("finished=%d", n), func(b *testing.B) {
			dir := seededDir(b, n)
			fi, err := os.Stat(filepath.Join(dir, FileName))
			if err != nil {
				b.Fatal(err)
			}
			for _, bounded := range []bool{false, true} {
				b.Run(fmt.Sprintf("bounded=%v", bounded), func(b *testing.B) {
					for b.Loop() {
						rep, err := check(dir, time.Second, bounded)
						if err != nil || rep.Damaged() || rep.Bounded != (bounded && fi.Size() > boundedOver) {
							b.Fatal(err, rep.Problems)
						}
					}
					b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
				})
			}
		})
	}
}

// seededDir is a state holding n finished jobs pruned to tombstones, made
// once per process (the benchmark runs -count times) and removed by
// TestMain with the history stores; its key is -n, apart from theirs.
func seededDir(b *testing.B, n int) string {
	b.Helper()
	historyDirs.Lock()
	defer historyDirs.Unlock()
	if dir, ok := historyDirs.m[-n]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "queue-check-")
	if err != nil {
		b.Fatal(err)
	}
	historyDirs.m[-n] = dir
	if err := SeedTombstones(dir, "/gone", n); err != nil {
		b.Fatal(err)
	}
	return dir
}

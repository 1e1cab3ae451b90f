package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

const benchJobs = 10000

func benchCands(n int) []Candidate {
	cs := make([]Candidate, n)
	for i := range cs {
		cs[i] = Candidate{Path: fmt.Sprintf("/srv/captures/scan-%05d.ply", i), Root: "/srv/captures", Size: int64(1 << 20), ModTime: time.Unix(1700000000, int64(i))}
	}
	return cs
}

// BenchmarkEnqueue10k measures enqueueing 10,000 new files: one fsynced
// transaction per file (files that arrive one at a time) and in
// transactions of 512 (what the daemon commits when files arrive together,
// as in the startup scan). Reported as seconds per 10,000 jobs.
func BenchmarkEnqueue10k(b *testing.B) {
	cs := benchCands(benchJobs)
	run := func(b *testing.B, per int) {
		for b.Loop() {
			b.StopTimer()
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			for batch := range slices.Chunk(cs, per) {
				if _, err := s.EnqueueBatch(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(time.Since(start).Seconds(), "s/10k-jobs")
			b.StopTimer()
			st, _ := s.Stats()
			if st.Stages[state.Queued] != benchJobs {
				b.Fatalf("queued %d", st.Stages[state.Queued])
			}
			s.Close()
			b.StartTimer()
		}
	}
	b.Run("one-per-transaction", func(b *testing.B) { run(b, 1) })
	b.Run("512-per-transaction", func(b *testing.B) { run(b, 512) })
}

// BenchmarkClaimCommit measures one worker step's store overhead: claim the
// earliest due job, commit it one stage on (fsynced), release.
func BenchmarkClaimCommit(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.EnqueueBatch(context.Background(), benchCands(benchJobs)); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		j, ok, err := s.Claim(now)
		if err != nil || !ok {
			b.Fatalf("claim: %v %v", ok, err)
		}
		// A same-stage retry keeps the job runnable for the next round.
		j.Attempts++
		if _, err := s.Commit(j, j.Stage); err != nil {
			b.Fatal(err)
		}
		s.Release(j.ID)
		n++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "transitions/s")
}

// BenchmarkStateFileSize runs 10,000 jobs through every stage to done with
// the default retention (5,000 finished kept) and reports the bbolt file
// size and the tombstones that keep dedupe working for the pruned ones.
func BenchmarkStateFileSize(b *testing.B) {
	for b.Loop() {
		dir := b.TempDir()
		// NoSync: the figure is about size, not fsync speed.
		s, err := Open(dir, Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		cs := benchCands(benchJobs)
		if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		for i := range benchJobs {
			j, ok, err := s.Claim(now)
			if err != nil || !ok {
				b.Fatal("claim", err)
			}
			for _, to := range []state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
				from := j.Stage
				_ = j.Move(to, now)
				switch to {
				case state.Ready:
					j.SHA256 = fmt.Sprintf("%064x", i)
					j.Params = state.PublishParams{Title: "scan", Format: "sog", Settings: map[string]any{
						"camera": map[string]any{"fov": 65, "position": []float64{2, 2, 2}, "target": []float64{0, 0, 0}}}}
				case state.Signed:
					j.Upload = state.Upload{URL: "https://storage.example/put/" + j.SHA256 + "?X-Amz-Signature=abcdef", Key: "uploads/" + j.SHA256, KeyField: "storageKey", IssuedAt: now}
				case state.Processing:
					j.SplatID, j.SplatHash, j.ViewerURL = fmt.Sprint(i), "h"+fmt.Sprint(i), "https://viewer/view?id=h"+fmt.Sprint(i)
				}
				if j, err = s.Commit(j, from); err != nil {
					b.Fatal(err)
				}
			}
			s.Release(j.ID)
		}
		st, err := s.Stats()
		if err != nil {
			b.Fatal(err)
		}
		var used int64
		_ = s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
		s.Close()
		fi, err := os.Stat(filepath.Join(dir, FileName))
		if err != nil {
			b.Fatal(err)
		}
		// The file grows in bbolt's allocation steps; MiB-used is how much
		// of it the pages in use span.
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-file")
		b.ReportMetric(float64(used)/(1<<20), "MiB-used")
		b.ReportMetric(float64(st.Jobs), "jobs-kept")
		b.ReportMetric(float64(st.Tombstones), "tombstones")
	}
}

// historyDirs holds, per tombstone count, a state seeded once per test
// binary: -count 3 seeds a million tombstones once, not three times.
var historyDirs = struct {
	sync.Mutex
	m map[int]string
}{m: map[int]string{}}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range historyDirs.m {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// historyStore opens a state holding `tombstones` finished and pruned jobs
// (SeedTombstones) and the same live part whatever that number: 10 jobs
// waiting to retry in an hour, so that nothing is due (an idle daemon) and
// Stats has an oldest unfinished job to read.
func historyStore(b *testing.B, tombstones int) *Store {
	b.Helper()
	historyDirs.Lock()
	defer historyDirs.Unlock()
	dir, ok := historyDirs.m[tombstones]
	if !ok {
		var err error
		if dir, err = os.MkdirTemp("", "queue-history-"); err != nil {
			b.Fatal(err)
		}
		historyDirs.m[tombstones] = dir
		start := time.Now()
		if err := SeedTombstones(dir, "/gone", tombstones); err != nil {
			b.Fatal(err)
		}
		b.Logf("seeded %d tombstones in %s", tombstones, time.Since(start).Round(time.Millisecond))
		if err := addWaiting(dir, 10); err != nil {
			b.Fatal(err)
		}
	}
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// addWaiting enqueues n jobs to the store in dir and makes each wait an hour
// for a retry.
func addWaiting(dir string, n int) error {
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		return err
	}
	defer s.Close()
	cs := benchCands(n)
	for i := range cs {
		cs[i].Path = fmt.Sprintf("/srv/waiting/scan-%d.ply", i)
	}
	if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
		return err
	}
	now := time.Now()
	for range n {
		j, ok, err := s.Claim(now)
		if err != nil || !ok {
			return fmt.Errorf("claim: %v %v", ok, err)
		}
		j.Attempts++
		j.NextAttempt = now.Add(time.Hour)
		if _, err := s.Commit(j, j.Stage); err != nil {
			return err
		}
		s.Release(j.ID)
	}
	return nil
}

var historySizes = []struct {
	name string
	n    int
}{{"tombstones=1k", 1000}, {"tombstones=1M", 1_000_000}}

// BenchmarkStats is the store read behind the daemon's 2-second stats loop
// (gauges, systemd STATUS, watchdog), with 1,000 and 1,000,000 finished
// jobs in the state: the time and allocations per call must not grow with
// the history.
func BenchmarkStats(b *testing.B) {
	for _, size := range historySizes {
		b.Run(size.name, func(b *testing.B) {
			s := historyStore(b, size.n)
			b.ReportAllocs()
			for b.Loop() {
				st, err := s.Stats()
				if err != nil || st.Tombstones != size.n || st.Stages[state.Queued] != 10 {
					b.Fatalf("Stats = %+v, %v", st, err)
				}
			}
		})
	}
}

// BenchmarkPeriodic is everything an idle daemon reads from the store on
// a timer: Stats (every 2 s) and an idle worker's Claim and NextDue (at
// least once a minute), with 1,000 and 1,000,000 finished jobs in the state.
func BenchmarkPeriodic(b *testing.B) {
	for _, size := range historySizes {
		b.Run(size.name, func(b *testing.B) {
			s := historyStore(b, size.n)
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Stats(); err != nil {
					b.Fatal(err)
				}
				if _, ok, err := s.Claim(now); ok || err != nil {
					b.Fatalf("Claim = %v, %v", ok, err)
				}
				if _, ok := s.NextDue(); !ok {
					b.Fatal("nothing waiting")
				}
			}
		})
	}
}

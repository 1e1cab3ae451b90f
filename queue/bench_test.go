package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// transaction per Enqueue (what the watcher does file by file), from 8
// goroutines at once, and one transaction for all (EnqueueAll, the startup
// scan). Reported as seconds per 10,000 jobs.
func BenchmarkEnqueue10k(b *testing.B) {
	cs := benchCands(benchJobs)
	run := func(b *testing.B, fn func(s *Store)) {
		for b.Loop() {
			b.StopTimer()
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			fn(s)
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
	ctx := context.Background()
	b.Run("sequential", func(b *testing.B) {
		run(b, func(s *Store) {
			for _, c := range cs {
				if _, err := s.Enqueue(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("8-goroutines", func(b *testing.B) {
		run(b, func(s *Store) {
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < int64(len(cs)); i = next.Add(1) - 1 {
						if _, err := s.Enqueue(ctx, cs[i]); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
		})
	})
	b.Run("EnqueueAll", func(b *testing.B) {
		run(b, func(s *Store) {
			if _, err := s.EnqueueAll(ctx, cs); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkClaimCommit measures one worker step's store overhead: claim the
// earliest due job, commit it one stage on (fsynced), release.
func BenchmarkClaimCommit(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.EnqueueAll(context.Background(), benchCands(benchJobs)); err != nil {
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
		if _, err := s.EnqueueAll(context.Background(), cs); err != nil {
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
		s.Close()
		fi, err := os.Stat(filepath.Join(dir, FileName))
		if err != nil {
			b.Fatal(err)
		}
		// The file grows in bbolt's allocation steps; UsedSize is how much
		// of it the pages in use span.
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-file")
		b.ReportMetric(float64(st.UsedSize)/(1<<20), "MiB-used")
		b.ReportMetric(float64(st.Jobs), "jobs-kept")
		b.ReportMetric(float64(st.Tombstones), "tombstones")
	}
}

package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// makeTree creates n empty .ply files spread over folders of 1,000.
func makeTree(b *testing.B, dir string, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprintf("f%06d.ply", i)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

func runWatcher(b *testing.B, o Options) (*Watcher, chan Candidate) {
	b.Helper()
	w, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan Candidate, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, out); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	for end := time.Now().Add(2 * time.Minute); !w.Healthy(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			b.Fatal("startup scan did not finish")
		}
	}
	return w, out
}

// BenchmarkDetectionLatency measures the time from a file's last write to
// its emission. The target is settle + 250 ms; ms_over_settle is the part
// the watcher adds.
func BenchmarkDetectionLatency(b *testing.B) {
	const settle = 200 * time.Millisecond
	dir := b.TempDir()
	_, out := runWatcher(b, Options{Roots: []Root{{Path: dir, Recursive: true}}, Settle: settle})
	var total, worst time.Duration
	n := 0
	for b.Loop() {
		p := filepath.Join(dir, fmt.Sprintf("lat%d.ply", n))
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < 10; j++ {
			f.Write(make([]byte, 64<<10))
		}
		f.Close()
		last := time.Now()
		select {
		case c := <-out:
			if c.Path != p {
				b.Fatalf("got %s, want %s", c.Path, p)
			}
		case <-time.After(time.Minute):
			b.Fatal("not emitted")
		}
		d := time.Since(last)
		total += d
		worst = max(worst, d)
		n++
	}
	avg := total / time.Duration(n)
	b.ReportMetric(float64(avg)/1e6, "ms/detect")
	b.ReportMetric(float64(avg-settle)/1e6, "ms_over_settle")
	b.ReportMetric(float64(worst-settle)/1e6, "worst_ms_over_settle")
}

// BenchmarkFullScan100k measures a full scan of 100,000 files of which none
// are new: restart_s is the first scan after a restart (each file asked of
// Known), s/scan the periodic rescan that follows.
func BenchmarkFullScan100k(b *testing.B) {
	dir := b.TempDir()
	makeTree(b, dir, 100_000)
	w, err := New(Options{
		Roots:  []Root{{Path: dir, Recursive: true, Mode: ModePoll}},
		Settle: time.Second,
		Known:  func(string, int64, time.Time) bool { return true },
	})
	if err != nil {
		b.Fatal(err)
	}
	r := w.roots[0]
	start := time.Now()
	w.scanRoot(r)
	restart := time.Since(start)
	if len(w.tr.pending) != 0 || len(w.tr.done) != 100_000 {
		b.Fatalf("after first scan: %d pending, %d done", len(w.tr.pending), len(w.tr.done))
	}
	n := 0
	start = time.Now()
	for b.Loop() {
		w.scanRoot(r)
		n++
	}
	if len(w.tr.pending) != 0 {
		b.Fatalf("rescan found %d new files", len(w.tr.pending))
	}
	b.ReportMetric(restart.Seconds(), "restart_s")
	b.ReportMetric(time.Since(start).Seconds()/float64(n), "s/scan")
}

// BenchmarkIdleCPU measures the process's CPU time per second of wall time
// while watching 10,000 files (in 10 folders) with nothing happening. The
// target is about zero: no timers run while nothing is pending.
func BenchmarkIdleCPU(b *testing.B) {
	dir := b.TempDir()
	makeTree(b, dir, 10_000)
	runWatcher(b, Options{
		Roots:  []Root{{Path: dir, Recursive: true}},
		Settle: 100 * time.Millisecond,
		Known:  func(string, int64, time.Time) bool { return true },
	})
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	time.Sleep(200 * time.Millisecond) // let the startup scan's garbage settle
	c0, t0 := cpu(), time.Now()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	used, wall := cpu()-c0, time.Since(t0)
	b.ReportMetric(float64(used)/1e6/wall.Seconds(), "cpu_ms/s")
}

package watcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// BenchmarkFullScan100k measures a full scan of 100,000 published files
// (1,000 folders of 100, a receipt beside each) of which none are new:
// restart_s is the first scan after a restart (each file asked of Known),
// s/scan the periodic rescan that follows; their CPU (getrusage of this
// process) over the CPU of `find DIR -type f` on the same tree, warm.
func BenchmarkFullScan100k(b *testing.B) {
	dir := b.TempDir()
	makeArchive(b, dir, 1000, 100)
	w, err := New(Options{
		Roots:  []Root{{Path: dir, Recursive: true, Mode: ModePoll}},
		Settle: time.Second,
		Known:  func(string, int64, time.Time) bool { return true },
	})
	if err != nil {
		b.Fatal(err)
	}
	findCPU := findCPU(b, dir)
	r := w.roots[0]
	c0, start := processCPU(), time.Now()
	w.scanRoot(context.Background(), r)
	restart, restartCPU := time.Since(start), processCPU()-c0
	if len(w.tr.pending) != 0 || len(w.tr.done) != 100_000 {
		b.Fatalf("after first scan: %d pending, %d done", len(w.tr.pending), len(w.tr.done))
	}
	n := 0
	c0, start = processCPU(), time.Now()
	for b.Loop() {
		w.scanRoot(context.Background(), r)
		n++
	}
	rescanCPU := (processCPU() - c0) / time.Duration(n)
	if len(w.tr.pending) != 0 {
		b.Fatalf("rescan found %d new files", len(w.tr.pending))
	}
	b.ReportMetric(restart.Seconds(), "restart_s")
	b.ReportMetric(time.Since(start).Seconds()/float64(n), "s/scan")
	b.ReportMetric(float64(restartCPU)/float64(findCPU), "restart_cpu_ratio_to_find")
	b.ReportMetric(float64(rescanCPU)/float64(findCPU), "rescan_cpu_ratio_to_find")
}

// makeArchive creates dirs folders of files published files each: a
// one-line .ply and its receipt.
func makeArchive(b *testing.B, dir string, dirs, files int) {
	b.Helper()
	for d := range dirs {
		sub := filepath.Join(dir, fmt.Sprintf("shoot-%04d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range files {
			p := filepath.Join(sub, fmt.Sprintf("take-%03d.ply", f))
			if err := os.WriteFile(p, []byte("ply\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p+".splat.json", []byte("{}"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// findCPU is the median user + system CPU of three warm runs of
// `find dir -type f`.
func findCPU(b *testing.B, dir string) time.Duration {
	b.Helper()
	var runs []time.Duration
	for i := range 4 {
		cmd := exec.Command("find", dir, "-type", "f")
		if err := cmd.Run(); err != nil {
			b.Fatalf("find: %v", err)
		}
		if i > 0 {
			runs = append(runs, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		}
	}
	slices.Sort(runs)
	return runs[1]
}

// processCPU is this process's user + system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu := processCPU
	time.Sleep(200 * time.Millisecond) // let the startup scan's garbage settle
	c0, t0 := cpu(), time.Now()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	used, wall := cpu()-c0, time.Since(t0)
	b.ReportMetric(float64(used)/1e6/wall.Seconds(), "cpu_ms/s")
}

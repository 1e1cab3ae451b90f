package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// HistoryState builds, in stateDir, the state of a daemon that has
// finished `finished` jobs long ago (retention has pruned them to
// tombstones, queue.SeedTombstones; their files, under
// stateDir/seeded-files, are gone) and now has `waiting` jobs waiting an
// hour to retry, so that nothing is due: an idle daemon with a history.
// The live part is the same whatever the history, so a figure taken on two
// such states shows only what the history costs.
func HistoryState(ctx context.Context, stateDir string, finished, waiting int) error {
	if err := queue.SeedTombstones(stateDir, filepath.Join(stateDir, "seeded-files"), finished); err != nil {
		return err
	}
	s, err := queue.Open(stateDir, queue.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer s.Close()
	cands := make([]queue.Candidate, waiting)
	for i := range cands {
		cands[i] = queue.Candidate{Path: fmt.Sprintf("/srv/waiting/scan-%d.ply", i), Root: "/srv/waiting", Size: 1 << 20, ModTime: time.Unix(1700000000, 0)}
	}
	if _, err := s.EnqueueBatch(ctx, cands); err != nil {
		return err
	}
	now := time.Now()
	for range waiting {
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

// HistoryFigures measures, on states of 1,000 and 1,000,000 finished jobs
// (HistoryState), the CPU time, wall time and allocations per call of Stats
// and of the whole periodic path (Stats, Claim, NextDue), as medians over
// alternating rounds (bench/README.md, history_stats_*). Target: the 1M
// figure within 1.2x of the 1k one.
func HistoryFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	sizes := []historySize{{"1k", 1000}, {"1M", 1_000_000}}
	stores, err := openHistoryStores(ctx, o, sizes)
	if err != nil {
		return nil, err
	}
	defer closeStores(stores)
	var figs []Figure
	for _, p := range historyPaths(time.Now()) {
		cpu, wall, allocs, err := measurePath(ctx, stores, sizes, p)
		if err != nil {
			return nil, err
		}
		figs = append(figs, pathFigures(p.name, sizes, cpu, wall, allocs)...)
	}
	// The same states under the real daemon, idle: its CPU and /metrics.
	// The stores are closed first: bbolt locks its file (queue.Open), and
	// the daemons open the same states.
	closeStores(stores)
	var states []idleState
	for _, sz := range sizes {
		states = append(states, idleState{name: sz.name, finished: sz.n, dir: filepath.Join(o.Dir, "history-"+sz.name)})
	}
	daemonFigs, err := DaemonIdleFigures(ctx, o, states)
	if err != nil {
		return nil, err
	}
	return append(figs, daemonFigs...), nil
}

// historySize is one history HistoryFigures compares: its name in the
// figures and its number of finished jobs.
type historySize struct {
	name string
	n    int
}

// historyPath is one timed read path: fn is one call of it, an error when
// the store does not answer as the state HistoryState built should.
type historyPath struct {
	name string
	fn   func(s *queue.Store) error
}

// The rounds and the calls per round measurePath times each path with.
const historyRounds, historyCalls = 7, 10000

// openHistoryStores builds each size's state under o.Dir (HistoryState,
// 10 jobs waiting) and opens it, in sizes' order. On an error it closes
// what it had opened.
func openHistoryStores(ctx context.Context, o BenchOptions, sizes []historySize) ([]*queue.Store, error) {
	stores := make([]*queue.Store, len(sizes))
	for i, sz := range sizes {
		dir := filepath.Join(o.Dir, "history-"+sz.name)
		t0 := time.Now()
		if err := HistoryState(ctx, dir, sz.n, 10); err != nil {
			closeStores(stores)
			return nil, fmt.Errorf("history state %s: %w", sz.name, err)
		}
		o.logf("history: %d finished jobs seeded in %s", sz.n, time.Since(t0).Round(100*time.Millisecond))
		s, err := queue.Open(dir, queue.Options{})
		if err != nil {
			closeStores(stores)
			return nil, err
		}
		stores[i] = s
	}
	return stores, nil
}

// closeStores closes the stores still open and forgets them, so that it
// may be called again (deferred, and before the daemons open the states).
func closeStores(stores []*queue.Store) {
	for i, s := range stores {
		if s != nil {
			s.Close()
			stores[i] = nil
		}
	}
}

// historyPaths is the table of read paths HistoryFigures times: Stats
// alone, and the periodic path (Stats, then an idle worker's Claim at now,
// which must find nothing due, and NextDue, which must find the waiting
// jobs).
func historyPaths(now time.Time) []historyPath {
	return []historyPath{
		{"stats", func(s *queue.Store) error {
			st, err := s.Stats()
			if err == nil && st.Stages[state.Queued] != 10 {
				err = fmt.Errorf("stats: %d queued, want 10", st.Stages[state.Queued])
			}
			return err
		}},
		{"periodic", func(s *queue.Store) error {
			if _, err := s.Stats(); err != nil {
				return err
			}
			if _, ok, err := s.Claim(now); ok || err != nil {
				return fmt.Errorf("claim: %v %v", ok, err)
			}
			if _, ok := s.NextDue(); !ok {
				return fmt.Errorf("nothing waiting")
			}
			return nil
		}},
	}
}

// measurePath times p on every store in historyRounds rounds of
// historyCalls calls, alternating which store goes first so that the
// order favours neither, and returns per store (sizes' order) each
// round's CPU ns, wall ns and allocations per call.
func measurePath(ctx context.Context, stores []*queue.Store, sizes []historySize, p historyPath) (cpu, wall, allocs [][]float64, err error) {
	cpu = make([][]float64, len(sizes))
	wall = make([][]float64, len(sizes))
	allocs = make([][]float64, len(sizes))
	for r := range historyRounds {
		for k := range sizes {
			i := (k + r) % len(sizes) // alternate which state goes first
			c, w, a, err := measure(stores[i], p.fn, historyCalls)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s %s: %w", p.name, sizes[i].name, err)
			}
			cpu[i], wall[i], allocs[i] = append(cpu[i], c), append(wall[i], w), append(allocs[i], a)
		}
		if ctx.Err() != nil {
			return nil, nil, nil, ctx.Err()
		}
	}
	return cpu, wall, allocs, nil
}

// pathFigures turns one path's rounds into figures: the medians per size,
// then the 1M-to-1k ratios of CPU and allocations against their target
// (sizes[0] is 1k, sizes[1] is 1M).
func pathFigures(path string, sizes []historySize, cpu, wall, allocs [][]float64) []Figure {
	var figs []Figure
	note := fmt.Sprintf("median of %d rounds of %d calls; 10 jobs waiting", historyRounds, historyCalls)
	for i, sz := range sizes {
		figs = append(figs,
			Figure{Name: fmt.Sprintf("history_%s_cpu_%s", path, sz.name), Value: round(median(cpu[i]), 0), Unit: "ns/call",
				Note: fmt.Sprintf("%s; %d finished jobs (tombstones); min %.0f max %.0f", note, sz.n, slices.Min(cpu[i]), slices.Max(cpu[i]))},
			Figure{Name: fmt.Sprintf("history_%s_wall_%s", path, sz.name), Value: round(median(wall[i]), 0), Unit: "ns/call", Note: note},
			Figure{Name: fmt.Sprintf("history_%s_allocs_%s", path, sz.name), Value: round(median(allocs[i]), 1), Unit: "allocs/call", Note: note})
	}
	cpuRatio := median(cpu[1]) / median(cpu[0])
	allocRatio := median(allocs[1]) / median(allocs[0])
	return append(figs,
		Figure{Name: "history_" + path + "_cpu_ratio_1M_to_1k", Value: round(cpuRatio, 3), Unit: "ratio",
			Target: "<= 1.2", Met: met(cpuRatio <= 1.2), Note: "the cost of a call does not grow with the finished jobs"},
		Figure{Name: "history_" + path + "_allocs_ratio_1M_to_1k", Value: round(allocRatio, 3), Unit: "ratio",
			Target: "<= 1.2", Met: met(allocRatio <= 1.2)})
}

// measure calls fn n times on s, after a warm-up, and returns the process
// CPU time, the wall time and the heap allocations per call.
func measure(s *queue.Store, fn func(*queue.Store) error, n int) (cpuNs, wallNs, allocs float64, err error) {
	for range n / 10 {
		if err := fn(s); err != nil {
			return 0, 0, 0, err
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, err := cpuTime()
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	for range n {
		if err := fn(s); err != nil {
			return 0, 0, 0, err
		}
	}
	wall := time.Since(t0)
	c1, err := cpuTime()
	if err != nil {
		return 0, 0, 0, err
	}
	runtime.ReadMemStats(&m1)
	return float64(c1-c0) / float64(n), float64(wall) / float64(n), float64(m1.Mallocs-m0.Mallocs) / float64(n), nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

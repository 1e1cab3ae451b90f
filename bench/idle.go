package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports (the kernel scales
// its accounting to it for /proc whatever its own HZ).
const clockTick = 10 * time.Millisecond

// The idle daemon's timeline (from the later of the two starts): the
// startup (open, first scan, first stats) settles, then CPU is read over a
// fixed window, then /metrics is timed; everything ends before the first
// maintenance pass, a minute after start (cmd/internal/daemon maintain), which
// walks the path index and would be measured as idle CPU otherwise.
const (
	idleSettle    = 8 * time.Second  // at least, after the start and 3 s after ready
	idleWindowEnd = 48 * time.Second // the CPU window ends here
	idleMinWindow = 20 * time.Second
	idleDeadline  = 57 * time.Second
	metricsCalls  = 100
)

// procCPU returns the CPU time a process has used so far, two ways:
// utime+stime of /proc/PID/stat (every thread, dead ones included, in
// clock ticks of 10 ms) and the sum of its live threads' run time in
// /proc/PID/task/*/schedstat (nanoseconds; a Go process does not end its
// threads, so nothing is lost), with the number of times they were run
// (schedstat's third field). An idle daemon uses a few ticks in a
// window of half a minute, too few for a ratio: the ratio is taken from
// schedstat and the stat figure is printed beside it as a check.
func procCPU(pid int) (stat, sched time.Duration, slices int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, 0, err
	}
	stat = time.Duration(ut+st) * clockTick
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return stat, 0, 0, fmt.Errorf("/proc/%d/task/*/schedstat: %v (no schedstat in this kernel?)", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended between the glob and the read
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue
		}
		ns, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return stat, 0, 0, fmt.Errorf("%s: %v", t, err)
		}
		sched += time.Duration(ns)
		slices += n
	}
	return stat, sched, slices, nil
}

// idleState is one history state a daemon is started on.
type idleState struct {
	name     string // "1k", "1M"
	finished int
	dir      string // the state directory HistoryState built
}

// DaemonIdleFigures starts `splatd run` on each history state (built by
// HistoryState: only the finished jobs differ) at the same time, so that
// whatever else loads the machine loads both alike, and measures each
// daemon from outside while it is idle: its CPU over a fixed window once
// the startup has settled, then the latency of /metrics (median of
// metricsCalls requests, the daemons asked in turn), all before the first
// maintenance pass. The 1M figures must be within 1.2x of the 1k ones.
func DaemonIdleFigures(ctx context.Context, o BenchOptions, states []idleState) ([]Figure, error) {
	sim, err := apisim.New(apisim.Options{Dir: filepath.Join(o.Dir, "idle-sim")})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	daemons := make([]*Daemon, len(states))
	defer func() {
		for _, d := range daemons {
			if d != nil {
				d.Stop(30 * time.Second)
			}
		}
	}()
	for i, st := range states {
		cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, "idle-"+st.name), StateDir: st.dir}
		cfgPath, err := cfg.Write()
		if err != nil {
			return nil, err
		}
		if daemons[i], err = StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd.log")); err != nil {
			return nil, err
		}
	}
	first, last := daemons[0].Started, daemons[0].Started
	ready := make([]time.Duration, len(daemons))
	for i, d := range daemons {
		if ready[i], err = d.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("idle %s: %w", states[i].name, err)
		}
		o.logf("idle %s: ready after %s", states[i].name, ready[i].Round(time.Millisecond))
		first, last = minTime(first, d.Started), maxTime(last, d.Started)
	}
	settled := last.Add(idleSettle)
	for i, d := range daemons {
		settled = maxTime(settled, d.Started.Add(ready[i]+3*time.Second))
	}
	window := first.Add(idleWindowEnd).Sub(settled)
	if window < idleMinWindow {
		return nil, fmt.Errorf("idle: the daemons settled %s after the first start, too late for a %s window before the first maintenance pass",
			settled.Sub(first).Round(time.Second), idleMinWindow)
	}
	sleepCtx(ctx, time.Until(settled))
	type sample struct {
		stat, sched time.Duration
		slices      int64
	}
	read := func() ([]sample, error) {
		out := make([]sample, len(daemons))
		for i, d := range daemons {
			var err error
			if out[i].stat, out[i].sched, out[i].slices, err = procCPU(d.PID()); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	c0, err := read()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	sleepCtx(ctx, window)
	c1, err := read()
	if err != nil {
		return nil, err
	}
	window = time.Since(t0)
	lat := make([][]float64, len(daemons))
	cl := &http.Client{Timeout: 5 * time.Second}
	for k := range metricsCalls {
		for j := range daemons {
			i := (j + k) % len(daemons) // alternate which daemon goes first
			ms, err := scrapeTime(cl, daemons[i])
			if err != nil {
				return nil, fmt.Errorf("idle %s: /metrics: %w", states[i].name, err)
			}
			lat[i] = append(lat[i], ms)
		}
	}
	if took := time.Since(first); took > idleDeadline {
		return nil, fmt.Errorf("idle: the measurement ended %s after the first start, too close to the first maintenance pass (1 min)", took.Round(time.Second))
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, d := range daemons {
		if errs := d.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("idle %s: the daemon logged errors: %v", states[i].name, errs)
		}
	}
	var figs []Figure
	cpu := make([]float64, len(daemons))
	for i, st := range states {
		hwm, err := daemons[i].VmHWM()
		if err != nil {
			return nil, err
		}
		cpu[i] = float64(c1[i].sched-c0[i].sched) / float64(time.Millisecond) / window.Seconds()
		statMs := float64(c1[i].stat-c0[i].stat) / float64(time.Millisecond)
		runs := c1[i].slices - c0[i].slices
		figs = append(figs,
			Figure{Name: "history_daemon_idle_cpu_" + st.name, Value: round(cpu[i], 3), Unit: "cpu_ms/s",
				Note: fmt.Sprintf("splatd run on %d finished jobs (tombstones), 10 waiting; schedstat over %s from %s after start (/proc/PID/stat: %.0f ms); "+
					"%d thread runs, %.3f ms each; ready after %s, VmHWM %d MiB",
					st.finished, window.Round(time.Second), settled.Sub(daemons[i].Started).Round(time.Second), statMs, runs, float64(c1[i].sched-c0[i].sched)/float64(time.Millisecond)/float64(max(runs, 1)),
					ready[i].Round(time.Millisecond), hwm>>20)},
			Figure{Name: "history_daemon_metrics_latency_" + st.name, Value: round(median(lat[i]), 2), Unit: "ms",
				Note: fmt.Sprintf("GET /metrics, median of %d; max %.1f", len(lat[i]), slices.Max(lat[i]))})
	}
	cpuRatio := cpu[1] / cpu[0]
	latRatio := median(lat[1]) / median(lat[0])
	figs = append(figs,
		Figure{Name: "history_daemon_idle_cpu_ratio_1M_to_1k", Value: round(cpuRatio, 3), Unit: "ratio", Target: "<= 1.2", Met: met(cpuRatio <= 1.2),
			Note: "both daemons idle side by side, same window, before the first maintenance pass"},
		Figure{Name: "history_daemon_metrics_latency_ratio_1M_to_1k", Value: round(latRatio, 3), Unit: "ratio", Target: "<= 1.2", Met: met(latRatio <= 1.2)})
	return figs, nil
}

// scrapeTime reads the whole of d's /metrics and returns how long it took,
// in milliseconds.
func scrapeTime(cl *http.Client, d *Daemon) (float64, error) {
	addr, err := d.MetricsAddr(time.Second)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return float64(took) / float64(time.Millisecond), err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

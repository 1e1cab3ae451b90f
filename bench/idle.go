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

// procCPU returns the CPU time a process has used so far, two ways: utime +
// stime of /proc/PID/stat (clock ticks of 10 ms, too coarse for an idle
// daemon's ratio) and the sum of its live threads' run time in
// /proc/PID/task/*/schedstat (nanoseconds; a Go process keeps its threads),
// with the number of times they were run. The ratio is taken from schedstat.
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
	run := &idleRun{daemons: make([]*Daemon, len(states))}
	defer run.stop()
	if err := run.start(o, sim, states); err != nil {
		return nil, err
	}
	if err := run.settle(o, states); err != nil {
		return nil, err
	}
	sleepCtx(ctx, time.Until(run.settled))
	if err := run.measureCPU(ctx); err != nil {
		return nil, err
	}
	if err := run.measureMetrics(states); err != nil {
		return nil, err
	}
	if err := run.check(ctx, states); err != nil {
		return nil, err
	}
	return run.figures(states)
}

// idleRun is one DaemonIdleFigures run: its daemons and what was measured
// of them, each slice in states' order.
type idleRun struct {
	daemons []*Daemon
	ready   []time.Duration // each daemon's start to ready
	first   time.Time       // the earliest start: the timeline's origin
	settled time.Time       // when the CPU window opens
	window  time.Duration   // the CPU window: planned by settle, as measured after measureCPU
	c0, c1  []cpuSample     // CPU at the window's start and end
	lat     [][]float64     // /metrics latencies, ms
}

// cpuSample is one procCPU reading.
type cpuSample struct {
	stat, sched time.Duration
	slices      int64
}

// start writes a config for each state (its own directory, the state's
// StateDir, sim) and starts a daemon on it, one after the other with
// nothing in between, so that they start as nearly together as they can.
func (r *idleRun) start(o BenchOptions, sim *apisim.Server, states []idleState) error {
	for i, st := range states {
		cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, "idle-"+st.name), StateDir: st.dir}
		cfgPath, err := cfg.Write()
		if err != nil {
			return err
		}
		if r.daemons[i], err = StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd.log")); err != nil {
			return err
		}
	}
	return nil
}

// stop stops the daemons that were started.
func (r *idleRun) stop() {
	for _, d := range r.daemons {
		if d != nil {
			d.Stop(30 * time.Second)
		}
	}
}

// settle waits for every daemon to be ready and plans the CPU window: it
// opens idleSettle after the later start and at least 3 s after each
// daemon's ready, and closes idleWindowEnd after the earlier start; a
// window shorter than idleMinWindow is an error.
func (r *idleRun) settle(o BenchOptions, states []idleState) error {
	r.first = r.daemons[0].Started
	last := r.daemons[0].Started
	r.ready = make([]time.Duration, len(r.daemons))
	for i, d := range r.daemons {
		var err error
		if r.ready[i], err = d.WaitReady(30 * time.Second); err != nil {
			return fmt.Errorf("idle %s: %w", states[i].name, err)
		}
		o.logf("idle %s: ready after %s", states[i].name, r.ready[i].Round(time.Millisecond))
		r.first, last = minTime(r.first, d.Started), maxTime(last, d.Started)
	}
	r.settled = last.Add(idleSettle)
	for i, d := range r.daemons {
		r.settled = maxTime(r.settled, d.Started.Add(r.ready[i]+3*time.Second))
	}
	r.window = r.first.Add(idleWindowEnd).Sub(r.settled)
	if r.window < idleMinWindow {
		return fmt.Errorf("idle: the daemons settled %s after the first start, too late for a %s window before the first maintenance pass",
			r.settled.Sub(r.first).Round(time.Second), idleMinWindow)
	}
	return nil
}

// readCPU reads every daemon's CPU so far (procCPU).
func (r *idleRun) readCPU() ([]cpuSample, error) {
	out := make([]cpuSample, len(r.daemons))
	for i, d := range r.daemons {
		var err error
		if out[i].stat, out[i].sched, out[i].slices, err = procCPU(d.PID()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// measureCPU reads the daemons' CPU at both ends of the planned window
// and replaces the window with the time that actually passed between the
// two readings.
func (r *idleRun) measureCPU(ctx context.Context) error {
	var err error
	if r.c0, err = r.readCPU(); err != nil {
		return err
	}
	t0 := time.Now()
	sleepCtx(ctx, r.window)
	if r.c1, err = r.readCPU(); err != nil {
		return err
	}
	r.window = time.Since(t0)
	return nil
}

// measureMetrics times metricsCalls scrapes of each daemon's /metrics,
// the daemons asked in turn and which goes first alternating, so that the
// order favours neither.
func (r *idleRun) measureMetrics(states []idleState) error {
	r.lat = make([][]float64, len(r.daemons))
	cl := &http.Client{Timeout: 5 * time.Second}
	for k := range metricsCalls {
		for j := range r.daemons {
			i := (j + k) % len(r.daemons) // alternate which daemon goes first
			ms, err := scrapeTime(cl, r.daemons[i])
			if err != nil {
				return fmt.Errorf("idle %s: /metrics: %w", states[i].name, err)
			}
			r.lat[i] = append(r.lat[i], ms)
		}
	}
	return nil
}

// check refuses the run if it ended after idleDeadline (the first
// maintenance pass may have been measured), was cancelled, or if a
// daemon logged errors.
func (r *idleRun) check(ctx context.Context, states []idleState) error {
	if took := time.Since(r.first); took > idleDeadline {
		return fmt.Errorf("idle: the measurement ended %s after the first start, too close to the first maintenance pass (1 min)", took.Round(time.Second))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, d := range r.daemons {
		if errs := d.Errors(); len(errs) > 0 {
			return fmt.Errorf("idle %s: the daemon logged errors: %v", states[i].name, errs)
		}
	}
	return nil
}

// figures turns the run into figures: per state, the idle CPU (from
// schedstat, with /proc/PID/stat's figure, the thread runs, the ready
// time and VmHWM in its note) and the median /metrics latency; then the
// 1M-to-1k ratios of both against their target (states[0] is 1k,
// states[1] is 1M).
func (r *idleRun) figures(states []idleState) ([]Figure, error) {
	var figs []Figure
	cpu := make([]float64, len(r.daemons))
	for i, st := range states {
		hwm, err := r.daemons[i].VmHWM()
		if err != nil {
			return nil, err
		}
		sched := float64(r.c1[i].sched-r.c0[i].sched) / float64(time.Millisecond)
		cpu[i] = sched / r.window.Seconds()
		statMs := float64(r.c1[i].stat-r.c0[i].stat) / float64(time.Millisecond)
		runs := r.c1[i].slices - r.c0[i].slices
		figs = append(figs,
			Figure{Name: "history_daemon_idle_cpu_" + st.name, Value: round(cpu[i], 3), Unit: "cpu_ms/s",
				Note: fmt.Sprintf("splatd run on %d finished jobs (tombstones), 10 waiting; schedstat over %s from %s after start (/proc/PID/stat: %.0f ms); "+
					"%d thread runs, %.3f ms each; ready after %s, VmHWM %d MiB",
					st.finished, r.window.Round(time.Second), r.settled.Sub(r.daemons[i].Started).Round(time.Second), statMs, runs, sched/float64(max(runs, 1)),
					r.ready[i].Round(time.Millisecond), hwm>>20)},
			Figure{Name: "history_daemon_metrics_latency_" + st.name, Value: round(median(r.lat[i]), 2), Unit: "ms",
				Note: fmt.Sprintf("GET /metrics, median of %d; max %.1f", len(r.lat[i]), slices.Max(r.lat[i]))})
	}
	cpuRatio := cpu[1] / cpu[0]
	latRatio := median(r.lat[1]) / median(r.lat[0])
	return append(figs,
		Figure{Name: "history_daemon_idle_cpu_ratio_1M_to_1k", Value: round(cpuRatio, 3), Unit: "ratio", Target: "<= 1.2", Met: met(cpuRatio <= 1.2),
			Note: "both daemons idle side by side, same window, before the first maintenance pass"},
		Figure{Name: "history_daemon_metrics_latency_ratio_1M_to_1k", Value: round(latRatio, 3), Unit: "ratio", Target: "<= 1.2", Met: met(latRatio <= 1.2)}), nil
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

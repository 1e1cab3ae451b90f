package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/sog"
	"golang.org/x/sys/unix"
)

// The SOG encoding figures: `splatd encode` on generated scenes with three
// SH bands (sog.WriteScene, fixed seeds), its ratio to splat-transform
// `-g cpu` on the same 20,000-splat file; 1 M, 6 M and 30 M splats
// encoded unconstrained, under the unit's GOMEMLIMIT=640MiB and under
// MDWE (prctl PR_SET_MDWE, the kernel's MemoryDenyWriteExecute); and a
// 6 M-splat PLY published through storage capped at 50 Mbit/s with
// publish.encode off and sog.
const (
	encodeSmall    = 20000
	slowUplinkBps  = 50e6 / 8 // 50 Mbit/s
	encodePartSize = 64 << 20
	fleetBeat      = 5 * time.Second // the daemon's: no share is worked in its first
	unitMemLimit   = "GOMEMLIMIT=640MiB"
)

// encodeScales are the large scenes, in splats; only the first is run
// o.Reps times (the others once: a 30 M-splat PLY is 6.9 GiB).
var encodeScales = []int{1000000, 6000000, 30000000}

// MDWEEnv, set in a process's environment, has bench.ExecMDWE run its
// arguments under PR_SET_MDWE.
const MDWEEnv = "SPLATBENCH_MDWE_EXEC"

// ExecMDWE, when MDWEEnv is set, forbids the process memory that is both
// writable and executable (PR_SET_MDWE, kept across execve) and executes
// its arguments in its place; it returns only on failure. splatbench
// calls it first, so that a figure can run splatd under MDWE.
func ExecMDWE(args []string) error {
	if os.Getenv(MDWEEnv) != "1" || len(args) == 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_MDWE, unix.PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_MDWE: %w", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, MDWEEnv+"=") })
	return syscall.Exec(args[0], args, env)
}

// splatTransformCLI is the splat-transform CLI, from SPLATD_SPLAT_TRANSFORM
// or the formats lane's cache, or "" when neither has it.
func splatTransformCLI() string {
	if p := os.Getenv("SPLATD_SPLAT_TRANSFORM"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "splatd-ci", "splat-transform", "node_modules", ".bin", "splat-transform")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// writeScene writes a generated scene of n splats with three SH bands.
func writeScene(path string, n int, seed uint64) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = sog.WriteScene(bw, n, 3, seed)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	fi, serr := os.Stat(path)
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// cmdRun is what timeCmd measured of a process.
type cmdRun struct {
	wall, cpu time.Duration
	rssMiB    float64
}

// timeCmd runs a command and returns its wall time and peak RSS (MiB).
func timeCmd(ctx context.Context, name string, args ...string) (time.Duration, float64, error) {
	r, err := runCmd(ctx, name, args...)
	return r.wall, r.rssMiB, err
}

// runCmd runs a command and returns its wall and CPU time and peak RSS.
func runCmd(ctx context.Context, name string, args ...string) (cmdRun, error) {
	return runCmdEnv(ctx, nil, false, name, args...)
}

// runCmdEnv is runCmd with env added to the environment and, when mdwe,
// under PR_SET_MDWE (through this executable's ExecMDWE).
func runCmdEnv(ctx context.Context, env []string, mdwe bool, name string, args ...string) (cmdRun, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if mdwe {
		self, err := os.Executable()
		if err != nil {
			return cmdRun{}, err
		}
		cmd = exec.CommandContext(ctx, self, append([]string{name}, args...)...)
		env = append(env, MDWEEnv+"=1")
	}
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return cmdRun{}, fmt.Errorf("%s %v: %v: %s", filepath.Base(name), args, err, out)
	}
	r := cmdRun{wall: took}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.rssMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return r, nil
}

// EncodeFigures are the encoder's figures (see the file comment).
func EncodeFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	dir := filepath.Join(o.Dir, "encode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	small := filepath.Join(dir, "scene-20k.ply")
	if _, err := writeScene(small, encodeSmall, 20); err != nil {
		return nil, err
	}
	var figs []Figure
	var times []float64
	for i := 0; i < o.Reps; i++ {
		took, _, err := timeCmd(ctx, o.Bin, "encode", "-to", "sog", small, filepath.Join(dir, "ours-20k.sog"))
		if err != nil {
			return figs, err
		}
		times = append(times, took.Seconds())
	}
	ours := median(times)
	figs = append(figs, Figure{Name: "encode_20k_sh3_seconds", Value: round(ours, 2), Unit: "s",
		Note: fmt.Sprintf("splatd encode -to sog, %d splats, SH bands 3, median of %d", encodeSmall, o.Reps)})
	figs = append(figs, splatTransformFigure(ctx, o, small, dir, ours))

	err := func() error {
		for i, n := range encodeScales {
			path := filepath.Join(dir, fmt.Sprintf("scene-%s.ply", splatsName(n)))
			o.logf("splatbench: encode: writing a %d-splat PLY", n)
			if _, err := writeScene(path, n, 1); err != nil {
				return err
			}
			defer os.Remove(path)
			reps := 1
			if i == 0 {
				reps = o.Reps
			}
			f, err := encodeScaleFigures(ctx, o, path, n, reps, dir)
			figs = append(figs, f...)
			if err != nil {
				return err
			}
			os.Remove(path)
		}
		return nil
	}()
	// The ratios of what was measured, also when a later scene failed.
	return append(figs, encodeRatioFigures(figs)...), err
}

func splatsName(n int) string { return fmt.Sprintf("%dm", n/1000000) }

// encodeScaleFigures encodes the n-splat PLY at path reps times in each of
// three settings: unconstrained, under the unit's memory limit, and under
// MDWE.
func encodeScaleFigures(ctx context.Context, o BenchOptions, path string, n, reps int, dir string) ([]Figure, error) {
	out := filepath.Join(dir, "ours.sog")
	defer os.Remove(out)
	name := "encode_" + splatsName(n) + "_sh3"
	note := fmt.Sprintf("splatd encode -to sog, %d splats, SH bands 3, median of %d", n, reps)
	var figs []Figure
	for _, mode := range []struct {
		suffix, what string
		env          []string
		mdwe         bool
	}{
		{"", "", nil, false},
		{"_640mib", " under " + unitMemLimit, []string{unitMemLimit}, false},
		{"_mdwe", " under PR_SET_MDWE (MemoryDenyWriteExecute)", nil, true},
	} {
		o.logf("splatbench: encode: %d splats%s (%d of it)", n, mode.what, reps)
		var wall, cpu, rss []float64
		var size int64
		for i := 0; i < reps; i++ {
			r, err := runCmdEnv(ctx, mode.env, mode.mdwe, o.Bin, "encode", "-to", "sog", path, out)
			if err != nil {
				return figs, err
			}
			wall, cpu, rss = append(wall, r.wall.Seconds()), append(cpu, r.cpu.Seconds()), append(rss, r.rssMiB)
			if fi, err := os.Stat(out); err == nil {
				size = fi.Size()
			}
		}
		rssFig := Figure{Name: name + mode.suffix + "_peak_rss", Value: round(median(rss), 0), Unit: "MiB", Note: "the encode process's peak RSS" + mode.what}
		switch {
		case mode.suffix == "_640mib" && n <= 6000000:
			rssFig.Target, rssFig.Met = "<= 640", met(median(rss) <= 640)
		case n >= 30000000:
			rssFig.Target, rssFig.Met = "<= 1024", met(median(rss) <= 1024)
		}
		figs = append(figs,
			Figure{Name: name + mode.suffix + "_seconds", Value: round(median(wall), 1), Unit: "s", Note: note + mode.what},
			Figure{Name: name + mode.suffix + "_cpu_seconds", Value: round(median(cpu), 1), Unit: "s", Note: "its user+system CPU time (less sensitive than wall time to other load on the machine)"},
			rssFig)
		if mode.suffix == "" {
			figs = append(figs, Figure{Name: name + "_bytes_per_splat", Value: round(float64(size)/float64(n), 2), Unit: "B", Note: fmt.Sprintf("the SOG is %.1f MiB", float64(size)/(1<<20))})
		}
	}
	return figs, nil
}

// encodeRatioFigures are the ratios of the scale figures: 6 M against
// 1 M, and MDWE against unconstrained.
func encodeRatioFigures(figs []Figure) []Figure {
	v := map[string]float64{}
	for _, f := range figs {
		v[f.Name] = f.Value
	}
	var out []Figure
	if a, b := v["encode_6m_sh3_seconds"], v["encode_1m_sh3_seconds"]; a > 0 && b > 0 {
		out = append(out, Figure{Name: "encode_6m_vs_1m_wall", Value: round(a/b, 2), Unit: "x", Target: "<= 8", Met: met(a/b <= 8),
			Note: fmt.Sprintf("CPU time %.2fx", v["encode_6m_sh3_cpu_seconds"]/v["encode_1m_sh3_cpu_seconds"])})
	}
	for _, n := range encodeScales {
		name := "encode_" + splatsName(n) + "_sh3"
		if a, b := v[name+"_mdwe_seconds"], v[name+"_seconds"]; a > 0 && b > 0 {
			out = append(out, Figure{Name: name + "_mdwe_vs_unconstrained", Value: round(a/b, 2), Unit: "x", Target: "<= 2", Met: met(a/b <= 2),
				Note: fmt.Sprintf("CPU time %.2fx", v[name+"_mdwe_cpu_seconds"]/v[name+"_cpu_seconds"])})
		}
	}
	return out
}

// splatTransformFigure times splat-transform -g cpu on the 20k file and
// gives its time as a multiple of ours.
func splatTransformFigure(ctx context.Context, o BenchOptions, in, dir string, ours float64) Figure {
	name := "encode_20k_speedup_vs_splat_transform_cpu"
	st := splatTransformCLI()
	if st == "" {
		return Figure{Name: name, Value: 0, Unit: "skipped", Note: "splat-transform is not installed (set SPLATD_SPLAT_TRANSFORM, or make test-formats installs it)"}
	}
	o.logf("splatbench: encode: splat-transform -g cpu on %d splats (minutes)", encodeSmall)
	took, _, err := timeCmd(ctx, st, "-q", "-w", "-g", "cpu", in, filepath.Join(dir, "theirs-20k.sog"))
	if err != nil {
		return Figure{Name: name, Value: 0, Unit: "skipped", Note: "splat-transform failed: " + err.Error()}
	}
	ratio := took.Seconds() / ours
	return Figure{Name: name, Value: round(ratio, 1), Unit: "x", Target: ">= 10", Met: met(ratio >= 10),
		Note: fmt.Sprintf("splat-transform -g cpu took %.1f s", took.Seconds())}
}

// UplinkFigures publishes a 6 M-splat PLY through storage capped at
// 50 Mbit/s, raw and encoded to SOG.
func UplinkFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	dir := filepath.Join(o.Dir, "uplink")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "scene-6m.ply")
	o.logf("splatbench: uplink: writing a 6000000-splat PLY")
	if _, err := writeScene(path, 6000000, 1); err != nil {
		return nil, err
	}
	defer os.Remove(path)
	return slowUplinkFigures(ctx, o, path, "6m")
}

// slowUplinkFigures times the large PLY from its arrival in the watch
// folder to the receipt's published_at, with a fresh v1 daemon through
// storage capped at 50 Mbit/s: publish.encode sog o.Reps times (the median
// is printed), then off once (the raw run is the cap's four minutes, the
// same each time).
func slowUplinkFigures(ctx context.Context, o BenchOptions, ply, scale string) ([]Figure, error) {
	var secs [2][]float64
	var bytes [2]float64
	for _, run := range []struct {
		i    int
		enc  string
		reps int
	}{{1, "sog", o.Reps}, {0, "off", 1}} {
		for rep := 0; rep < run.reps; rep++ {
			o.logf("splatbench: uplink: publishing the %s-splat PLY at 50 Mbit/s, publish.encode %s (%d of %d)", scale, run.enc, rep+1, run.reps)
			s, b, err := slowUplinkRun(ctx, o, ply, run.enc, rep)
			if err != nil {
				return nil, err
			}
			secs[run.i], bytes[run.i] = append(secs[run.i], s), b
		}
	}
	raw, enc := median(secs[0]), median(secs[1])
	ratio := raw / enc
	runs := func(v []float64) string {
		out := ""
		for i, s := range v {
			if i > 0 {
				out += ", "
			}
			out += fmt.Sprintf("%.1f", s)
		}
		return fmt.Sprintf("median of %d: %s s", len(v), out)
	}
	return []Figure{
		{Name: "publish_" + scale + "_bytes_uploaded_raw", Value: round(bytes[0]/(1<<20), 1), Unit: "MiB", Note: "publish.encode off: the PLY"},
		{Name: "publish_" + scale + "_bytes_uploaded_encoded", Value: round(bytes[1]/(1<<20), 1), Unit: "MiB", Note: fmt.Sprintf("publish.encode sog: %.1fx fewer", bytes[0]/bytes[1])},
		{Name: "publish_" + scale + "_50mbit_finished_to_published_raw", Value: round(raw, 1), Unit: "s", Note: runs(secs[0])},
		{Name: "publish_" + scale + "_50mbit_finished_to_published_encoded", Value: round(enc, 1), Unit: "s", Note: "includes the encoding; " + runs(secs[1])},
		{Name: "publish_" + scale + "_50mbit_encoded_sooner", Value: round(ratio, 2), Unit: "x", Target: ">= 8", Met: met(ratio >= 8)},
	}, nil
}

func slowUplinkRun(ctx context.Context, o BenchOptions, ply, encode string, rep int) (secs, uploaded float64, err error) {
	name := fmt.Sprintf("%s-%d", encode, rep+1) // a fresh daemon, simulator and watch folder each run
	sim, err := apisim.New(apisim.Options{DiscardObjects: true, ProcessingDelay: 100 * time.Millisecond, PartSize: encodePartSize,
		StorageBandwidth: slowUplinkBps, Dir: filepath.Join(o.Dir, "encode-sim-"+name),
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}})
	if err != nil {
		return 0, 0, err
	}
	defer sim.Close()
	cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, "encode-"+name), Workers: 1, Protocol: "v1", ParallelParts: 1, Encode: encode}
	path, err := cfg.Write()
	if err != nil {
		return 0, 0, err
	}
	d, err := StartDaemon(o.Bin, path, filepath.Join(cfg.Dir, "splatd.log"))
	if err != nil {
		return 0, 0, err
	}
	defer d.Stop(30 * time.Second)
	if _, err := d.WaitReady(30 * time.Second); err != nil {
		return 0, 0, err
	}
	// A file found in a daemon's first fleet beat waits for that beat; the
	// figure is a running daemon's, so the file comes after it.
	select {
	case <-time.After(time.Until(d.Started.Add(fleetBeat + time.Second))):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	// A hard link is a finished file appearing at once, as a rename would.
	file := filepath.Join(cfg.Inbox, "scene.ply")
	finished := time.Now()
	if err := os.Link(ply, file); err != nil {
		return 0, 0, err
	}
	defer os.Remove(file)
	if err := waitReceipt(ctx, d, file, 10*time.Minute); err != nil {
		return 0, 0, err
	}
	var r after.Receipt
	b, err := os.ReadFile(after.ReceiptPath(file))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || r.PublishedAt == nil {
		return 0, 0, fmt.Errorf("receipt of %s: %v (published_at %v)", file, err, r.PublishedAt)
	}
	received, _, _ := sessionTotals(sim.Stats())
	return r.PublishedAt.Sub(finished).Seconds(), float64(received), nil
}

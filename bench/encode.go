package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/sog"
)

// The SOG encoding figures: `splatd encode` on generated scenes with three
// SH bands (sog.WriteScene, fixed seeds), its ratio to splat-transform
// `-g cpu` on the same 20,000-splat file, and a 1 M-splat PLY published
// through storage capped at 50 Mbit/s with publish.encode off and sog.
const (
	encodeSmall    = 20000
	encodeLarge    = 1000000
	slowUplinkBps  = 50e6 / 8 // 50 Mbit/s
	encodePartSize = 64 << 20
)

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
	cmd := exec.CommandContext(ctx, name, args...)
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

	o.logf("splatbench: encode: writing a %d-splat PLY", encodeLarge)
	large := filepath.Join(dir, "scene-1m.ply")
	if _, err := writeScene(large, encodeLarge, 1); err != nil {
		return figs, err
	}
	var wall, cpu, rss []float64
	for i := 0; i < o.Reps; i++ {
		r, err := runCmd(ctx, o.Bin, "encode", "-to", "sog", large, filepath.Join(dir, "ours-1m.sog"))
		if err != nil {
			return figs, err
		}
		wall, cpu, rss = append(wall, r.wall.Seconds()), append(cpu, r.cpu.Seconds()), append(rss, r.rssMiB)
	}
	os.Remove(filepath.Join(dir, "ours-1m.sog"))
	reps := fmt.Sprintf("median of %d", o.Reps)
	figs = append(figs,
		Figure{Name: "encode_1m_sh3_seconds", Value: round(median(wall), 1), Unit: "s", Note: "splatd encode -to sog, 1,000,000 splats, SH bands 3, " + reps},
		Figure{Name: "encode_1m_sh3_cpu_seconds", Value: round(median(cpu), 1), Unit: "s", Note: "its user+system CPU time (less sensitive than wall time to other load on the machine), " + reps},
		Figure{Name: "encode_1m_sh3_peak_rss", Value: round(median(rss), 0), Unit: "MiB", Note: "the encode process's peak RSS (the PLY is 237 MiB), " + reps})
	pub, err := slowUplinkFigures(ctx, o, large)
	return append(figs, pub...), err
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

// slowUplinkFigures publishes the large PLY with a fresh daemon (v1, one
// part at a time) through storage capped at 50 Mbit/s, with publish.encode
// off and then sog, and times each from the file's arrival in the watch
// folder (a rename: the file is finished) to the receipt's published_at.
// slowUplinkFigures publishes the large PLY with a fresh daemon (v1, one
// part at a time) through storage capped at 50 Mbit/s, with publish.encode
// off and then sog, and times each from the file's arrival in the watch
// folder (a rename: the file is finished) to the receipt's published_at.
// The pair runs o.Reps times; the figures are medians, the ratio that of
// the medians.
func slowUplinkFigures(ctx context.Context, o BenchOptions, ply string) ([]Figure, error) {
	var secs [2][]float64
	var bytes [2]float64
	for rep := 0; rep < o.Reps; rep++ {
		for i, enc := range []string{"off", "sog"} {
			o.logf("splatbench: encode: publishing 1 M splats at 50 Mbit/s, publish.encode %s (%d of %d)", enc, rep+1, o.Reps)
			s, b, err := slowUplinkRun(ctx, o, ply, enc, rep)
			if err != nil {
				return nil, err
			}
			secs[i], bytes[i] = append(secs[i], s), b
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
		{Name: "publish_1m_bytes_uploaded_raw", Value: round(bytes[0]/(1<<20), 1), Unit: "MiB", Note: "publish.encode off: the PLY"},
		{Name: "publish_1m_bytes_uploaded_encoded", Value: round(bytes[1]/(1<<20), 1), Unit: "MiB", Note: fmt.Sprintf("publish.encode sog: %.1fx fewer", bytes[0]/bytes[1])},
		{Name: "publish_1m_50mbit_finished_to_published_raw", Value: round(raw, 1), Unit: "s", Note: runs(secs[0])},
		{Name: "publish_1m_50mbit_finished_to_published_encoded", Value: round(enc, 1), Unit: "s", Note: "includes the encoding; " + runs(secs[1])},
		{Name: "publish_1m_50mbit_encoded_sooner", Value: round(ratio, 2), Unit: "x", Target: ">= 4", Met: met(ratio >= 4)},
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

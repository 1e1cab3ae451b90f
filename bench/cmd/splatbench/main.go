// Command splatbench prints splatd's performance figures, one per line as
// "name value unit", with the target and whether it was met: the upload's
// peak memory and throughput against curl (legacy and v1), the bytes a v1
// resume sends again, pacing under a strict rate limit, restart time with
// 10,000 finished jobs, the watcher's and the queue's own benchmarks, and
// what an idle daemon costs with a long history, and the SOG encoder's
// speed, memory and effect on a slow uplink. It runs the real binary against the in-process
// simulator on loopback.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/splatd/splatd/bench"
)

func main() {
	if err := bench.ExecMDWE(os.Args[1:]); err != nil { // returns at once unless asked for
		fmt.Fprintln(os.Stderr, "splatbench:", err)
		os.Exit(1)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("splatbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("splatd", "bin/splatd", "the splatd binary")
	reps := fs.Int("reps", 3, "repetitions of the upload and restart figures (medians are printed)")
	only := fs.String("only", "", "comma-separated groups to run (default all: upload,v1,pacing,restart,watcher,queue,history,encode,uplink,folders)")
	limit := fs.Duration("timeout", 60*time.Minute, "stop after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stderr, "splatbench: %v (build it with make build)\n", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "splatd-bench-")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *limit)
	defer cancel()

	o := bench.BenchOptions{Bin: *bin, Dir: dir, Reps: max(*reps, 1), Log: stderr}
	groups := []struct {
		name string
		fn   func() ([]bench.Figure, error)
	}{
		{"upload", func() ([]bench.Figure, error) { return bench.UploadFigures(ctx, o) }},
		{"v1", func() ([]bench.Figure, error) { return bench.V1Figures(ctx, o) }},
		{"pacing", func() ([]bench.Figure, error) { return bench.PacingFigures(ctx, o) }},
		{"restart", func() ([]bench.Figure, error) { return bench.RestartFigures(ctx, o) }},
		{"watcher", func() ([]bench.Figure, error) { return bench.GoBenchFigures(ctx, o, 3, "./watcher/") }},
		{"queue", func() ([]bench.Figure, error) { return bench.GoBenchFigures(ctx, o, 3, "./queue/") }},
		{"history", func() ([]bench.Figure, error) { return bench.HistoryFigures(ctx, o) }},
		{"encode", func() ([]bench.Figure, error) { return bench.EncodeFigures(ctx, o) }},
		{"uplink", func() ([]bench.Figure, error) { return bench.UplinkFigures(ctx, o) }},
		{"folders", func() ([]bench.Figure, error) { return bench.FolderFigures(ctx, o) }},
	}
	start := time.Now()
	missed, failed := 0, 0
	for _, g := range groups {
		if *only != "" && !strings.Contains(","+*only+",", ","+g.name+",") {
			continue
		}
		fmt.Fprintf(stderr, "splatbench: %s...\n", g.name)
		// A group that fails part way still prints the figures it took.
		figs, err := g.fn()
		for _, f := range figs {
			fmt.Fprintln(stdout, f)
			if f.Met != nil && !*f.Met {
				missed++
			}
		}
		if err != nil {
			fmt.Fprintf(stdout, "%s FAILED: %v\n", g.name, err)
			failed++
		}
	}
	fmt.Fprintf(stdout, "splatbench: done in %s; %d figures missed their target, %d groups failed\n", time.Since(start).Round(time.Second), missed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

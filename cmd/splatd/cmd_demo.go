package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// demoFile is one sample the demo drops into the inbox, and what it expects.
type demoFile struct {
	name  string
	how   string
	want  state.Stage
	write func(path string) error
}

func cmdDemo(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "demo")
	keep := fs.Bool("keep", false, "keep the daemon running after the samples so you can drop your own files in")
	dir := fs.String("dir", "", "work folder (default: a temporary folder, removed at the end unless -keep)")
	protocol := fs.String("protocol", config.ProtocolLegacy, "the API protocol to show: legacy, or v1 (resumable multipart uploads, parts in parallel)")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	if *protocol != config.ProtocolLegacy && *protocol != config.ProtocolV1 {
		return usageError(c, fs, "-protocol must be %s or %s, got %q", config.ProtocolLegacy, config.ProtocolV1, *protocol)
	}
	removeDir := *dir == "" && !*keep
	if *dir == "" {
		d, err := os.MkdirTemp("", "splatd-demo-")
		if err != nil {
			fmt.Fprintln(c.stderr, err)
			return exitFailure
		}
		*dir = d
		if !*keep {
			defer os.RemoveAll(d)
		}
	}
	// The demo shows samples published once: on an earlier run's state they
	// would be known already, and the simulator (a new one) would see none.
	if _, err := os.Stat(filepath.Join(*dir, "state")); err == nil {
		fmt.Fprintf(c.stderr, "demo: %s holds an earlier demo's state; remove the folder or choose another -dir\n", *dir)
		return exitFailure
	}
	dm, err := newDemo(c, *dir, *protocol)
	if err != nil {
		fmt.Fprintf(c.stderr, "demo: %v\n", err)
		return exitFailure
	}
	defer dm.close()
	return dm.run(ctx, *keep, removeDir)
}

// demo is `splatd demo`: the simulator, a daemon configured for it, and
// an inbox the samples are dropped into.
type demo struct {
	c        *cli
	dir      string
	inbox    string
	protocol string
	sim      *apisim.Server
	cfg      config.Config
	logPath  string
	logFile  *os.File
	d        *daemon.Daemon
	events   chan journeyEvent // the daemon's stage changes
}

// newDemo starts the simulator and builds (without running) the daemon.
func newDemo(c *cli, dir, protocol string) (*demo, error) {
	dm := &demo{c: c, dir: dir, inbox: filepath.Join(dir, "inbox"), protocol: protocol, logPath: filepath.Join(dir, "splatd.log")}
	for _, p := range []string{dm.inbox, filepath.Join(dir, "sim")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	sim, err := apisim.New(apisim.Options{
		Dir:             filepath.Join(dir, "sim"),
		ProcessingDelay: 1500 * time.Millisecond,
		Branches:        map[string]int{"main": 12},
		PartSize:        demoPartSize,
		Logger:          cliLogger(c),
	})
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	dm.sim = sim
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(sim.Token()+"\n"), 0o600); err != nil {
		sim.Close()
		return nil, err
	}
	cfg := config.Default()
	cfg.API.BaseURL, cfg.API.CAFile, cfg.API.TokenFile, cfg.API.Protocol = sim.URL(), sim.CAFile(), tokenFile, protocol
	cfg.Watch = []config.Watch{{Path: dm.inbox}}
	cfg.Settle = config.Duration(time.Second)
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Poll = config.Poll{Interval: config.Duration(500 * time.Millisecond), MaxInterval: config.Duration(2 * time.Second), Timeout: config.Duration(time.Minute)}
	cfg.Metrics.Listen = "127.0.0.1:0"
	if errs := cfg.Validate(true); len(errs) > 0 {
		sim.Close()
		return nil, errs
	}
	dm.cfg = cfg
	if dm.logFile, err = os.Create(dm.logPath); err != nil {
		sim.Close()
		return nil, err
	}
	dlog, _ := newLogger(cfg.Log, dm.logFile, false)
	// Every stage change, as the pool commits it; a buffer generous enough
	// that the pool never waits on the printer (extra events are dropped).
	dm.events = make(chan journeyEvent, 1024)
	onTransition := func(j state.Job, from state.Stage) {
		select {
		case dm.events <- journeyEvent{j, from}:
		default:
		}
	}
	o := daemon.Options{Getenv: c.getenv, Logger: dlog, Version: buildVersion(), OnTransition: onTransition}
	if dm.d, err = daemon.Open(&dm.cfg, o); err != nil {
		dm.logFile.Close()
		sim.Close()
		return nil, err
	}
	return dm, nil
}

// demoPartSize is the simulator's v1 part size in the demo: small, so that
// the larger sample goes up in several parts in parallel.
const demoPartSize = 256 << 10

func (dm *demo) close() {
	dm.d.Close()
	dm.logFile.Close()
	dm.sim.Close()
}

// run drops the samples, prints their journeys and the summary, and with
// keep leaves the daemon running until ctx ends.
func (dm *demo) run(ctx context.Context, keep, removeDir bool) int {
	out, c := dm.c.stdout, dm.c
	fmt.Fprintf(out, "splatd demo (api.protocol %s)\n  simulator  %s (storage %s)\n  inbox      %s\n  metrics    http://%s/  (status page; /metrics, /api/status)\n  log        %s\n\n",
		dm.protocol, dm.sim.URL(), dm.sim.StorageURL(), dm.inbox, dm.d.MetricsAddr(), dm.logPath)

	events := dm.events
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- dm.d.Run(dctx) }()

	files := demoFiles(dm.protocol)
	start := time.Now()
	go func() {
		for _, f := range files {
			if err := f.write(filepath.Join(dm.inbox, f.name)); err != nil {
				fmt.Fprintf(out, "  cannot write %s: %v\n", f.name, err)
			}
		}
	}()
	fmt.Fprintln(out, "dropping samples:")
	for _, f := range files {
		fmt.Fprintf(out, "  %-24s %s\n", f.name, f.how)
	}
	fmt.Fprintln(out, "\njourney:")
	final := followJourney(dctx, out, dm.d.Store(), events, start, len(files), 90*time.Second)
	okAll := dm.summary(ctx, files, final)
	if removeDir {
		fmt.Fprintln(out, "(the demo folder is removed at exit; -keep or -dir DIR keeps it)")
	}
	if keep {
		fmt.Fprintf(out, "\nsplatd keeps running: drop .ply or .sog files into\n  %s\nand watch them with\n  %s jobs -config %s\nor on the status page http://%s/\n(Ctrl-C stops it.)\n",
			dm.inbox, os.Args[0], writeDemoConfig(dm.dir, &dm.cfg), dm.d.MetricsAddr())
		select {
		case <-ctx.Done():
		case err := <-runErr:
			runErr <- err
		}
	}
	stop()
	if err := <-runErr; err != nil {
		fmt.Fprintf(c.stderr, "demo: daemon: %v\n", err)
		return exitFailure
	}
	if !okAll {
		fmt.Fprintf(c.stderr, "demo: not every sample ended as expected; see %s\n", dm.logPath)
		if !keep {
			data, _ := os.ReadFile(dm.logPath)
			fmt.Fprintf(c.stderr, "%s\n", tail(data, 40))
		}
		return exitFailure
	}
	fmt.Fprintf(out, "\ndemo passed: %d samples published once each, the invalid one rejected with its reason.\n", len(files)-1)
	return exitOK
}

// summary prints each sample's outcome, a branch's checkpoints and what the
// simulator saw; it reports whether every sample ended as expected.
func (dm *demo) summary(ctx context.Context, files []demoFile, final map[string]state.Job) bool {
	out := dm.c.stdout
	fmt.Fprintln(out, "\nsummary:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tSTAGE\tVIEWER LINK OR REASON")
	okAll := true
	for _, f := range files {
		j, found := final[filepath.Join(dm.inbox, f.name)]
		stage, result := "missing", "never seen"
		if found {
			stage, result = string(j.Stage), j.ViewerURL
			if j.Stage != state.Done {
				result = j.FailReason
			}
		}
		if !found || j.Stage != f.want {
			okAll = false
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.name, stage, oneLine(result))
	}
	tw.Flush()

	fmt.Fprintln(out, "\ncheckpoints of branch main (newest first, first 5):")
	page, err := dm.d.Client().Checkpoints(ctx, "main", 5, "")
	if err != nil {
		fmt.Fprintf(out, "  %v\n", err)
		okAll = false
	} else {
		for _, cp := range page.Checkpoints {
			fmt.Fprintf(out, "  %s  %s  %s\n", cp.ID, rfc3339(cp.CreatedAt), oneLine(cp.Description))
		}
	}
	st := dm.sim.Stats()
	if dm.protocol == config.ProtocolV1 {
		fmt.Fprintf(out, "\nsimulator: %d upload sessions, %d parts received, %d completes, %d splats, %d storage requests with an Authorization header\n",
			st.Creates, st.PartPuts, st.Completes, st.V1Splats, st.StorageAuthHeaders)
	} else {
		fmt.Fprintf(out, "\nsimulator: %d uploads, %d publishes, %d storage requests with an Authorization header\n",
			st.Uploads, st.Publishes, st.StorageAuthHeaders)
	}
	fmt.Fprintf(out, "receipts:  %s\n", filepath.Join(dm.inbox, "*.splat.json"))
	return okAll
}

// demoFiles are the samples; under v1 one of them is large enough to go up
// in several parts.
func demoFiles(protocol string) []demoFile {
	files := []demoFile{
		{name: "lobby.ply", how: "plain 3DGS PLY, written at once", want: state.Done,
			write: func(p string) error {
				return writeWith(p, func(w io.Writer) error { return splatfile.WritePLY(w, 4000) })
			}},
		{name: "statue.compressed.ply", how: "compressed PLY, written slowly over ~3 s", want: state.Done,
			write: func(p string) error { return writeSlowly(p, 3*time.Second) }},
		{name: "garden.sog", how: "SOG, written as .garden.sog.part then renamed", want: state.Done,
			write: func(p string) error {
				tmp := filepath.Join(filepath.Dir(p), ".garden.sog.part")
				if err := writeWith(tmp, func(w io.Writer) error { return splatfile.WriteSOG(w, 3000) }); err != nil {
					return err
				}
				return os.Rename(tmp, p)
			}},
		{name: "broken.ply", how: "not a splat at all (must be rejected, never uploaded)", want: state.Failed,
			write: func(p string) error {
				return os.WriteFile(p, []byte("this is a text file someone named .ply\n"), 0o644)
			}},
	}
	if protocol == config.ProtocolV1 {
		files = append(files[:1], append([]demoFile{{name: "hangar.ply", how: "plain PLY of ~1.6 MB: 7 parts of 256 KiB, 4 in flight", want: state.Done,
			write: func(p string) error {
				return writeWith(p, func(w io.Writer) error { return splatfile.WritePLY(w, 6800) })
			}}}, files[1:]...)...)
	}
	return files
}

func writeWith(path string, gen func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSlowly writes a compressed PLY in pieces, as a capture tool or a slow
// network copy does; the watcher must not emit it before the last piece.
func writeSlowly(path string, over time.Duration) error {
	var buf bytes.Buffer
	if err := splatfile.WriteCompressedPLY(&buf, 20000); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const pieces = 8
	data := buf.Bytes()
	step := (len(data) + pieces - 1) / pieces
	for i := 0; i < len(data); i += step {
		if _, err := f.Write(data[i:min(i+step, len(data))]); err != nil {
			return err
		}
		time.Sleep(over / pieces)
	}
	return nil
}

type journeyEvent struct {
	job  state.Job
	from state.Stage
}

// followJourney prints each stage change of every job until n jobs are
// final or the timeout passes, and returns the jobs by path.
func followJourney(ctx context.Context, w io.Writer, st *queue.Store, events <-chan journeyEvent, start time.Time, n int, timeout time.Duration) map[string]state.Job {
	final := map[string]bool{}
	deadline := time.After(timeout)
	for len(final) < n {
		select {
		case ev := <-events:
			j := ev.job
			line := fmt.Sprintf("  %5.1fs  %-24s %-10s → %-10s", time.Since(start).Seconds(), filepath.Base(j.Path), ev.from, j.Stage)
			switch {
			case j.Stage == state.Done && j.DuplicateOf != 0:
				line += fmt.Sprintf("  same content as job %d: not published again", j.DuplicateOf)
			case j.Stage == state.Done:
				line += "  " + j.ViewerURL
			case j.Stage == state.Failed:
				line += "  " + oneLine(j.FailReason)
			case j.Stage == state.Processing:
				line += "  splat " + j.SplatID
			}
			fmt.Fprintln(w, strings.TrimRight(line, " "))
			if j.Stage.Final() {
				final[j.Path] = true
			}
		case <-ctx.Done():
			n = 0
		case <-deadline:
			fmt.Fprintf(w, "  (gave up waiting after %s)\n", timeout)
			n = 0
		}
	}
	byPath := map[string]state.Job{}
	if jobs, err := st.List(queue.Filter{}); err == nil {
		for _, j := range jobs {
			byPath[j.Path] = j
		}
	}
	return byPath
}

// writeDemoConfig leaves a config beside the demo's files so that the CLI
// (splatd jobs, retry, publish, checkpoints) can be tried against it.
func writeDemoConfig(dir string, cfg *config.Config) string {
	p := filepath.Join(dir, "config.yaml")
	_ = os.WriteFile(p, []byte(cfg.Redacted(nil, nil)), 0o600)
	return p
}

func tail(b []byte, lines int) []byte {
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n > lines {
				return b[i+1:]
			}
		}
	}
	return b
}

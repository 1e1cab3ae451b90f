package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// recentFinished is how many finished jobs `splatd jobs` shows by default,
// besides every live one.
const recentFinished = 10

// jobsOptions are the flags of `splatd jobs`.
type jobsOptions struct {
	cfgPath  *string
	stage    *string
	limit    *int
	all      *bool
	asJSON   *bool
	watch    *bool
	interval *time.Duration
}

func cmdJobs(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "jobs")
	o := jobsOptions{
		cfgPath:  configFlag(c, fs),
		stage:    fs.String("state", "", "only jobs in these stages, comma-separated ("+daemon.StageNames()+"); every such job, not only the recent ones"),
		limit:    fs.Int("limit", 0, "at most N jobs, the most recently updated (0: no limit)"),
		all:      fs.Bool("all", false, "every job (default: the live ones and the last "+fmt.Sprint(recentFinished)+" finished)"),
		asJSON:   fs.Bool("json", false, "print JSON, of every job (as -all) unless -limit says otherwise"),
		watch:    fs.Bool("watch", false, "follow: print the list again every -interval until interrupted"),
		interval: fs.Duration("interval", 2*time.Second, "with -watch, the time between two lists"),
	}
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	for _, s := range strings.Split(*o.stage, ",") {
		if s = strings.TrimSpace(s); s != "" && s != daemon.StageUploading && !state.Stage(s).Valid() {
			return usageError(c, fs, "unknown stage %q (stages: %s)", s, daemon.StageNames())
		}
	}
	if *o.limit < 0 || *o.interval <= 0 {
		return usageError(c, fs, "-limit must be 0 or more and -interval positive")
	}
	cfg, err := config.Load(*o.cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	if !*o.watch {
		return showJobs(ctx, c, cfg, o, false)
	}
	tty := isTerminal(c.stdout)
	for first := true; ; first = false {
		if tty {
			fmt.Fprint(c.stdout, "\033[H\033[2J") // home, clear: the list in place
		} else if !first {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "splatd jobs at %s (every %s; Ctrl-C ends)\n", time.Now().Format(time.TimeOnly), *o.interval)
		if code := showJobs(ctx, c, cfg, o, !first); code != exitOK {
			if ctx.Err() != nil {
				return exitOK // Ctrl-C while a listing was read: that is how -watch ends
			}
			return code
		}
		t := time.NewTimer(*o.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return exitOK
		case <-t.C:
		}
	}
}

// showJobs fetches the jobs (from the daemon, else the state file), selects
// them as the flags say and prints them; quiet leaves out the note that
// the daemon is not running (a -watch repeats it otherwise).
func showJobs(ctx context.Context, c *cli, cfg *config.Config, o jobsOptions, quiet bool) int {
	var views []daemon.JobView
	body, live, err := daemon.Call(ctx, cfg.StateDir, http.MethodGet, "/v1/jobs?stage="+*o.stage)
	if err == nil && live {
		err = json.Unmarshal(body, &views)
	}
	if err == nil && !live {
		err = daemon.WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			var err error
			views, err = daemon.ListViews(st, *o.stage, daemon.Live{})
			return err
		})
		if err == nil && !quiet {
			fmt.Fprintf(c.stderr, "(splatd is not running; read %s directly)\n", cfg.StateDir)
		}
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "jobs: %v\n", err)
		return exitFailure
	}
	// Scripts read -json: it keeps listing every job unless told otherwise.
	shown, hidden := selectJobs(views, *o.stage != "" || *o.all || *o.asJSON, *o.limit)
	if *o.asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(shown)
		return exitOK
	}
	printJobs(c.stdout, shown, time.Now())
	if hidden > 0 {
		fmt.Fprintf(c.stdout, "(%d older finished job(s) not shown: -all lists every job, -state STAGE every job in a stage)\n", hidden)
	}
	return exitOK
}

// selectJobs keeps, unless every is set, the live jobs (not done, failed or
// canceled) and the recentFinished most recently updated finished ones;
// then at most limit (0: no limit), the most recently updated. The result
// is in id order; hidden counts the finished jobs left out by default.
func selectJobs(views []daemon.JobView, every bool, limit int) (shown []daemon.JobView, hidden int) {
	shown = []daemon.JobView{}
	var finished []daemon.JobView
	for _, v := range views {
		if !every && state.Stage(v.Stage).Finished() {
			finished = append(finished, v)
			continue
		}
		shown = append(shown, v)
	}
	byRecent := func(a, b daemon.JobView) int { return b.UpdatedAt.Compare(a.UpdatedAt) }
	slices.SortStableFunc(finished, byRecent)
	if len(finished) > recentFinished {
		hidden = len(finished) - recentFinished
		finished = finished[:recentFinished]
	}
	shown = append(shown, finished...)
	if limit > 0 && len(shown) > limit {
		slices.SortStableFunc(shown, byRecent)
		shown = shown[:limit]
	}
	slices.SortFunc(shown, func(a, b daemon.JobView) int { return cmp.Compare(a.ID, b.ID) })
	return shown, hidden
}

func printJobs(w io.Writer, views []daemon.JobView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTAGE\tATTEMPTS\tAGE\tACTIVITY\tFILE\tRESULT")
	for _, v := range views {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.Stage, v.Attempts, age(now.Sub(v.CreatedAt)), activityText(v), state.Shown(v.File), resultText(v))
	}
	tw.Flush()
}

// activityText is what the job does in its stage now, in the words of
// /api/jobs and the status page (metrics.Activity); "-" for nothing.
func activityText(v daemon.JobView) string {
	if v.Activity == "" {
		return "-"
	}
	return state.Shown(v.Activity)
}

func resultText(v daemon.JobView) string {
	result := v.URL
	if v.Error != "" {
		result = oneLine(v.Error)
	}
	if v.DuplicateOf != 0 {
		result = fmt.Sprintf("DUPLICATE of job %d (same content, not published again): %s", v.DuplicateOf, v.URL)
	}
	if v.Adopted {
		result = "adopted from its receipt: " + v.URL
	}
	if v.EncodeSkipped != "" {
		result += " (sent unencoded: " + v.EncodeSkipped + ")"
	}
	return state.Shown(result) // whole: an error cut short loses its cause
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

func cmdAdopt(ctx context.Context, c *cli, args []string) int {
	flags := newFlags(c, "adopt")
	cfgPath := configFlag(c, flags)
	dryRun := flags.Bool("dry-run", false, "say what would be adopted, change nothing")
	asJSON := flags.Bool("json", false, "print JSON")
	pos, code, ok := parseOrExit(flags, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(c, flags, "give the one folder whose receipts to adopt (e.g. a watch folder)")
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return usageError(c, flags, "%v", err)
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	var rep daemon.AdoptReport
	q := url.Values{"dir": {dir}}
	if *dryRun {
		q.Set("dry_run", "1")
	}
	body, live, err := daemon.CallTimeout(ctx, cfg.StateDir, http.MethodPost, "/v1/adopt?"+q.Encode(), 0)
	switch {
	case err != nil:
	case live:
		err = json.Unmarshal(body, &rep)
	default:
		rep, err = adoptOffline(ctx, cfg, dir, *dryRun)
		if err == nil {
			fmt.Fprintf(c.stderr, "(splatd is not running; wrote %s directly)\n", cfg.StateDir)
		}
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "adopt: %v\n", err)
		return exitFailure
	}
	printAdopt(c, rep, *asJSON)
	return exitOK
}

// adoptOffline adopts dir's receipts into the state directory itself, as
// no daemon is running. Rebuilding a lost state directory is what adopt is
// for, so a missing one is made; a dry run leaves nothing behind.
func adoptOffline(ctx context.Context, cfg *config.Config, dir string, dryRun bool) (daemon.AdoptReport, error) {
	stateDir := cfg.StateDir
	if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
		if dryRun {
			tmp, err := os.MkdirTemp("", "splatd-adopt-dry-run-")
			if err != nil {
				return daemon.AdoptReport{}, err
			}
			defer os.RemoveAll(tmp)
			stateDir = tmp
		} else if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return daemon.AdoptReport{}, fmt.Errorf("state_dir: %w", err)
		}
	}
	var rep daemon.AdoptReport
	err := daemon.WithOfflineStore(stateDir, func(st *queue.Store) error {
		var err error
		rep, err = daemon.AdoptDir(ctx, st, cfg, dir, dryRun)
		return err
	})
	return rep, err
}

// printAdopt prints what adopt did, as JSON or one line a file and a sum.
func printAdopt(c *cli, rep daemon.AdoptReport, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	verb := "adopted"
	if rep.DryRun {
		verb = "would adopt"
	}
	for _, a := range rep.Adopted {
		job := ""
		if a.Job != 0 {
			job = fmt.Sprintf("job %d, ", a.Job)
		}
		fmt.Fprintf(c.stdout, "%s %s (%ssplat %s %s)\n", verb, state.Shown(a.File), job, a.Splat, state.Shown(a.URL))
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(c.stdout, "not adopted %s: %s\n", state.Shown(s.File), oneLine(s.Why))
	}
	fmt.Fprintf(c.stdout, "%s %d file(s) as done; %d already known; %d receipt(s) not evidence\n", verb, len(rep.Adopted), rep.Known, len(rep.Skipped))
}

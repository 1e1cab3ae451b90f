package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// stateLockWait is how long the state commands wait for a running
// splatd's lock before saying it runs.
const stateLockWait = 3 * time.Second

func cmdState(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "state")
	cfgPath := configFlag(c, fs)
	force := fs.Bool("force", false, "recover: rebuild the state file even when the check finds it sound")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || (pos[0] != "check" && pos[0] != "recover") {
		return usageError(c, fs, "give check or recover")
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	if pos[0] == "check" {
		return stateCheck(c, cfg, *cfgPath)
	}
	return stateRecover(ctx, c, cfg, *cfgPath, *force)
}

// recoverCommand is the command that recovers the state of the config at
// cfgPath, as the operator types it.
func recoverCommand(cfgPath string) string {
	return "splatd state recover -config " + cfgPath
}

func stateCheck(c *cli, cfg *config.Config, cfgPath string) int {
	rep, err := queue.Check(cfg.StateDir, stateLockWait)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(c.stdout, "%s: no state file: the next start makes a new one and adopts the receipts in the watch folders\n", rep.Path)
		return exitOK
	case errors.Is(err, queue.ErrLocked):
		fmt.Fprintf(c.stderr, "state check: a splatd is using %s: it checked the file when it started and stops at damage it meets; stop it to check the file now\n", cfg.StateDir)
		return exitFailure
	case err != nil:
		fmt.Fprintf(c.stderr, "state check: %v\n", err)
		return exitFailure
	}
	if !rep.Damaged() {
		fmt.Fprintf(c.stdout, "%s: sound (%d bytes, %d pages, %d job records)\n", rep.Path, rep.Size, rep.Pages, rep.Jobs)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%s: DAMAGED\n", rep.Path)
	for _, p := range rep.Problems {
		fmt.Fprintf(c.stdout, "  %s\n", p)
	}
	if rep.More > 0 {
		fmt.Fprintf(c.stdout, "  and %d more\n", rep.More)
	}
	fmt.Fprintf(c.stdout, "stop splatd and run `%s`: it keeps this file aside, salvages every job it can read and adopts the receipts in the watch folders\n", recoverCommand(cfgPath))
	return exitFailure
}

func stateRecover(ctx context.Context, c *cli, cfg *config.Config, cfgPath string, force bool) int {
	rep, err := queue.Check(cfg.StateDir, stateLockWait)
	switch {
	case errors.Is(err, queue.ErrLocked):
		fmt.Fprintf(c.stderr, "state recover: a splatd is using %s: stop it first\n", cfg.StateDir)
		return exitFailure
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(c.stderr, "state recover: %v\n", err)
		return exitFailure
	case err == nil && !rep.Damaged() && !force:
		fmt.Fprintf(c.stdout, "%s: sound, nothing to recover (-force rebuilds it anyway)\n", rep.Path)
		return exitOK
	}
	rr, err := queue.Recover(cfg.StateDir, stateLockWait, time.Now())
	if err != nil {
		fmt.Fprintf(c.stderr, "state recover: %v\n", err)
		return exitFailure
	}
	if rr.Aside != "" {
		fmt.Fprintf(c.stdout, "kept the damaged file aside as %s (delete it yourself once you no longer need it)\n", rr.Aside)
	}
	fmt.Fprintf(c.stdout, "salvaged %d job record(s), %d dedupe tombstone(s), %d path record(s)\n", rr.Jobs, rr.Tombstones, rr.Paths)
	if len(rr.Lost)+len(rr.Unreadable) > 0 {
		fmt.Fprintf(c.stdout, "lost %d job record(s) (%s) and %d unreadable (%s): their files are found again; a receipt that proves one published adopts it\n",
			len(rr.Lost), ids(rr.Lost), len(rr.Unreadable), ids(rr.Unreadable))
	}
	failed := false
	err = daemon.WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
		for _, dir := range cfg.WatchPaths() {
			ar, err := daemon.AdoptDir(ctx, st, cfg, dir, false)
			if err != nil {
				fmt.Fprintf(c.stderr, "adopt %s: %v\n", state.Shown(dir), err)
				failed = true
				continue
			}
			fmt.Fprintf(c.stdout, "adopted %d file(s) of %s from their receipts; %d already known; %d receipt(s) not evidence\n", len(ar.Adopted), state.Shown(dir), ar.Known, len(ar.Skipped))
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(c.stderr, "state recover: adopting the receipts: %v\n", err)
		return exitFailure
	}
	if failed {
		fmt.Fprintf(c.stderr, "some watch folders could not be read: once they can, run `splatd adopt -config %s DIR` for each, before the daemon starts\n", cfgPath)
		return exitFailure
	}
	fmt.Fprintln(c.stdout, "the state is rebuilt: start splatd. A file with no receipt whose job was lost is queued again (under api.protocol v1 its content's Idempotency-Key finds the same session: it is not published twice)")
	return exitOK
}

// ids lists job ids for a line, the first few.
func ids(v []uint64) string {
	var b strings.Builder
	for i, id := range v {
		if i == 8 {
			fmt.Fprintf(&b, ", …")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", id)
	}
	return b.String()
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
)

func cmdRun(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "run")
	cfgPath := configFlag(c, fs)
	dry := fs.Bool("dry-run", false, "predict a run and exit: list each file with what the daemon would do (publish, adopt from its receipt, duplicate, already in the state, invalid, incomplete, skipped) and why; reads the state and receipts, no API call, nothing recorded")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments (did you mean -config %s?)", pos[0])
	}
	cfg, err := config.Load(*cfgPath, true)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	log, logOut := newLogger(cfg.Log, c.stderr, onJournal(c.getenv, c.stderr))
	if *dry {
		if err := daemon.DryRun(ctx, cfg, c.stdout, log); err != nil {
			fmt.Fprintln(c.stderr, err)
			return exitFailure
		}
		return exitOK
	}
	// SIGHUP reloads the config: without this, it would end the process
	// (and systemd counts a death by SIGHUP as clean: no restart).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d, err := daemon.Open(cfg, daemon.Options{
		ConfigPath: *cfgPath,
		Getenv:     c.getenv,
		Logger:     log,
		LogLevel:   logOut,
		Version:    buildVersion(),
		HUP:        hup,
	})
	if err != nil {
		// Once, as a log line: on a terminal it reads as one, under
		// systemd it is filed with priority "error".
		log.Error().Err(err).Msg("cannot start")
		return exitFailure
	}
	defer d.Close()
	if err := d.Run(ctx); err != nil {
		log.Error().Err(err).Msg("stopped with an error")
		return exitFailure
	}
	return exitOK
}

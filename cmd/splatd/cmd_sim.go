package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

func cmdSim(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "sim")
	listen := fs.String("listen", "127.0.0.1:0", "API listen address (storage gets another port on the same host)")
	dir := fs.String("dir", "", "folder for the CA file, the token, a ready config and stored objects (default: a temporary folder)")
	window := fs.Duration("window", time.Minute, "rate-limit window")
	delay := fs.Duration("processing-delay", 2*time.Second, "time from publish to the terminal task status")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "splatd-sim-")
		if err != nil {
			fmt.Fprintln(c.stderr, err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	sim, err := apisim.New(apisim.Options{
		Listen:          *listen,
		Dir:             *dir,
		Window:          *window,
		ProcessingDelay: *delay,
		Branches:        map[string]int{"main": 123, "demo": 7},
		Logger:          cliLogger(c),
	})
	if err != nil {
		fmt.Fprintf(c.stderr, "sim: %v\n", err)
		return exitFailure
	}
	defer sim.Close()

	tokenFile := filepath.Join(*dir, "token")
	cfgFile := filepath.Join(*dir, "config.yaml")
	if err := os.WriteFile(tokenFile, []byte(sim.Token()+"\n"), 0o600); err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitFailure
	}
	cfg := fmt.Sprintf("api:\n  base_url: %s\n  ca_file: %s\n  token_file: %s\npoll: {interval: 1s}\n", sim.URL(), sim.CAFile(), tokenFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "base_url:   %s\nstorage:    %s\nca_file:    %s\ntoken:      %s\ntoken_file: %s\nconfig:     %s\nbranches:   main (123 checkpoints), demo (7)\n",
		sim.URL(), sim.StorageURL(), sim.CAFile(), sim.Token(), tokenFile, cfgFile)
	self := os.Args[0] // as the user typed it (bin/splatd after make build)
	fmt.Fprintf(c.stdout, "\ntry:  %s checkpoints -config %s main -limit 5\n      %s publish -config %s FILE.ply\n", self, cfgFile, self, cfgFile)
	fmt.Fprintln(c.stdout, "(Ctrl-C stops the simulator)")
	if err := sim.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(c.stderr, "sim: %v\n", err)
		return exitFailure
	}
	return exitOK
}

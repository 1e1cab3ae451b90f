package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

func cmdRetry(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "retry")
	cfgPath := configFlag(c, fs)
	failed := fs.Bool("failed", false, "re-queue every failed job")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	var target string
	switch {
	case *failed && len(pos) == 0:
		target = "failed"
	case !*failed && len(pos) == 1:
		if _, err := strconv.ParseUint(pos[0], 10, 64); err != nil {
			return usageError(c, fs, "job id %q is not a number (see splatd jobs)", pos[0])
		}
		target = pos[0]
	default:
		return usageError(c, fs, "give one job ID or -failed")
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	var n int
	var hints []string
	body, live, err := daemon.Call(ctx, cfg.StateDir, http.MethodPost, "/v1/retry?id="+target)
	if err == nil && live {
		var out struct {
			Retried int      `json:"retried"`
			Hints   []string `json:"hints"`
		}
		err = json.Unmarshal(body, &out)
		n, hints = out.Retried, out.Hints
	}
	if err == nil && !live {
		err = daemon.WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			var err error
			hints = daemon.RetryHints(st, target)
			n, err = daemon.Retry(st, target)
			return err
		})
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "retry: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(c.stdout, daemon.RetryDone(target, n))
	for _, h := range hints {
		fmt.Fprintf(c.stderr, "retry: warning: %s\n", h)
	}
	return exitOK
}

func cmdResolve(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "resolve")
	cfgPath := configFlag(c, fs)
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(c, fs, "give the held job's ID and the SPLAT_ID you found on the account")
	}
	if _, err := strconv.ParseUint(pos[0], 10, 64); err != nil {
		return usageError(c, fs, "job id %q is not a number (see splatd jobs -state held)", pos[0])
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	q := url.Values{"id": {pos[0]}, "splat": {pos[1]}}
	_, live, err := daemon.Call(ctx, cfg.StateDir, http.MethodPost, "/v1/resolve?"+q.Encode())
	if err == nil && !live {
		err = daemon.WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			_, err := daemon.Resolve(st, pos[0], pos[1])
			return err
		})
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "resolve: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "job %s: polling splat %s to done (no new publish)\n", pos[0], pos[1])
	return exitOK
}

// cmdControl runs `splatd cancel|republish|forget`.
func cmdControl(name string) func(ctx context.Context, c *cli, args []string) int {
	return func(ctx context.Context, c *cli, args []string) int {
		op := daemon.ControlOps[name]
		fs := newFlags(c, name)
		cfgPath := configFlag(c, fs)
		pos, code, ok := parseOrExit(fs, args)
		if !ok {
			return code
		}
		if len(pos) != 1 {
			if name == "cancel" {
				return usageError(c, fs, "give one job ID (see splatd jobs)")
			}
			return usageError(c, fs, "give one job ID or file PATH (see splatd jobs)")
		}
		ref := pos[0]
		if _, err := strconv.ParseUint(ref, 10, 64); err != nil {
			if name == "cancel" {
				return usageError(c, fs, "job id %q is not a number (see splatd jobs)", ref)
			}
			if ref, err = filepath.Abs(ref); err != nil {
				return usageError(c, fs, "%v", err)
			}
		}
		cfg, err := config.Load(*cfgPath, false)
		if err != nil {
			fmt.Fprintln(c.stderr, err)
			return exitUsage
		}
		var j state.Job
		body, live, err := daemon.Call(ctx, cfg.StateDir, http.MethodPost, "/v1/"+name+"?"+url.Values{"ref": {ref}}.Encode())
		if err == nil && live {
			err = json.Unmarshal(body, &j)
		}
		if err == nil && !live {
			err = daemon.WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
				var err error
				j, err = daemon.Control(cfg.TrustFS(), st, op, ref)
				return err
			})
			if err == nil {
				fmt.Fprintf(c.stderr, "(splatd is not running; changed %s directly)\n", cfg.StateDir)
			}
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "%s: %v\n", name, err)
			return exitFailure
		}
		fmt.Fprintln(c.stdout, op.Done(j))
		return exitOK
	}
}

func cmdReload(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "reload")
	cfgPath := configFlag(c, fs)
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	// The file is checked here first: the daemon would refuse an invalid
	// one anyway, and its state_dir says where the daemon listens.
	cfg, err := config.Load(*cfgPath, true)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		fmt.Fprintln(c.stderr, "reload: refused, nothing sent: the daemon keeps its running config")
		return exitFailure
	}
	body, live, err := daemon.Call(ctx, cfg.StateDir, http.MethodPost, "/v1/reload")
	if err == nil && !live {
		err = fmt.Errorf("no splatd is running on %s (state_dir)", cfg.StateDir)
	}
	var res daemon.ReloadResult
	if err == nil {
		err = json.Unmarshal(body, &res)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "reload: %v\n", err)
		return exitFailure
	}
	return printReload(c, res)
}

// printReload prints a reload's outcome; exit 1 when it was refused.
func printReload(c *cli, res daemon.ReloadResult) int {
	if len(res.Errors) > 0 && len(res.Applied) == 0 {
		fmt.Fprintf(c.stderr, "reload of %s refused; the running config stays:\n", res.Config)
		for _, e := range res.Errors {
			fmt.Fprintf(c.stderr, "  %s\n", e)
		}
		return exitFailure
	}
	switch {
	case len(res.Applied) == 0:
		fmt.Fprintf(c.stdout, "reloaded %s: nothing to apply\n", res.Config)
	default:
		fmt.Fprintf(c.stdout, "reloaded %s: applied %s\n", res.Config, strings.Join(res.Applied, ", "))
	}
	if len(res.Restart) > 0 {
		fmt.Fprintf(c.stdout, "need a restart (old values kept until then): %s\n", strings.Join(res.Restart, ", "))
	}
	code := exitOK
	for _, e := range res.Errors {
		fmt.Fprintf(c.stderr, "reload: %s\n", e)
		code = exitFailure
	}
	return code
}

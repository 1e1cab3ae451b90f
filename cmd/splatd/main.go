// Command splatd watches folders for finished 3D Gaussian splat files and
// publishes each one exactly once through the splat REST API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// it comes from the module's build info.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit codes shared by every command.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// cli is what a command may touch of the outside world, so that tests run
// commands in-process with their own streams and environment.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// describe, when set, receives a command's flag set at -h in place of
	// the usage text (specs reads the flags for completion and the man page).
	describe func(*flag.FlagSet)
}

type command struct {
	name    string
	args    string // the synopsis after the name
	summary string
	run     func(ctx context.Context, c *cli, args []string) int
}

func commands() []command {
	return []command{
		{"run", "[-config FILE] [-dry-run]", "run the daemon: watch folders and publish every finished file once", cmdRun},
		{"demo", "[-keep] [-dir DIR] [-protocol legacy|v1]", "simulator + daemon + sample files in a temporary folder, through either API protocol", cmdDemo},
		{"sim", "[-listen ADDR] [-dir DIR]", "run the API simulator alone; prints its base URL, CA file and token", cmdSim},
		{"publish", "[-config FILE] [-force] FILE|FOLDER...", "publish files (or unbundled SOG folders) once, in the foreground, with progress; content the daemon or a receipt shows published is not sent again unless -force; records nothing itself", cmdPublish},
		{"checkpoints", "[-config FILE] BRANCH [-limit N] [-all] [-json]", "list a branch's checkpoints, newest first", cmdCheckpoints},
		{"jobs", "[-config FILE] [-state STAGE] [-limit N] [-all] [-watch] [-json]", "list the live jobs and the last finished ones (with upload rate and ETA); -watch follows", cmdJobs},
		{"retry", "[-config FILE] ID|-failed", "re-queue a failed or held job, try a job waiting for a retry now, or re-queue all failed jobs; a done job is published again (a new publish, on purpose)", cmdRetry},
		{"adopt", "[-config FILE] [-dry-run] DIR", "record files whose receipt says done as published (a new or lost state_dir): never published again", cmdAdopt},
		{"resolve", "[-config FILE] ID SPLAT_ID", "close a held job with the splat its lost publish answer created (no new publish)", cmdResolve},
		{"splats", "[-config FILE] [-limit N] [-all] [-json]", "list the account's own splats (v1 API), newest first", cmdSplats},
		{"cancel", "[-config FILE] ID", "end a job that has not sent its publish call (queued, waiting, uploading, held) as canceled: not a failure, no failure alert", cmdControl("cancel")},
		{"republish", "[-config FILE] ID|PATH", "publish a done job's file again, on purpose: a new splat (the file must still be at its path)", cmdControl("republish")},
		{"forget", "[-config FILE] ID|PATH", "drop a finished job, its path record, its content's dedupe record and the receipt it left: the file is found again as new and may be published again", cmdControl("forget")},
		{"state", "check|recover [-config FILE] [-force]", "check the state file (splatd.db) for damage, or recover a damaged one: it is kept aside, every job still readable is salvaged and the receipts in the watch folders are adopted", cmdState},
		{"reload", "[-config FILE]", "make the running daemon read its config again (as SIGHUP does) and print what was applied", cmdReload},
		{"validate", "FILE...", "check files locally, as the daemon does before upload", cmdValidate},
		{"encode", "[-to FORMAT] FILE OUT", "encode a 3DGS PLY (FILE) as a SOG (OUT), as publish.encode does before upload", cmdEncode},
		{"config", "check [-config FILE] [-probe]", "print the effective config (token redacted) or its errors; -probe also asks the API whether it is reachable and accepts the token, and (legacy) reaches the storage host with TLS verified; nothing is uploaded", cmdConfig},
		{"version", "", "print the version", cmdVersion},
		{"completion", "bash|zsh|fish", "print a shell completion script", cmdCompletion},
		{"man", "", "print the manual page (roff)", cmdMan},
		{"help", "[COMMAND]", "list the commands, or describe one", nil},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return dispatch(ctx, &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv}, args)
}

func dispatch(ctx context.Context, c *cli, args []string) int {
	args, c, ok := globalConfig(c, args)
	if !ok {
		fmt.Fprintln(c.stderr, "splatd: -config needs a FILE (splatd -config FILE COMMAND …)")
		return exitUsage
	}
	if len(args) == 0 {
		usage(c.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && !isHelpWord(args[1]) {
			return dispatch(ctx, c, []string{args[1], "-h"})
		}
		usage(c.stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	for _, cmd := range commands() {
		if cmd.name == name && cmd.run != nil {
			if asksHelp(args[1:]) {
				// Asked-for help is output, not a diagnostic: stdout, so
				// that `splatd run -h | less` works.
				c = &cli{stdout: c.stdout, stderr: c.stdout, getenv: c.getenv}
			}
			return cmd.run(ctx, c, args[1:])
		}
	}
	fmt.Fprintf(c.stderr, "splatd: unknown command %q\n\n", name)
	usage(c.stderr)
	return exitUsage
}

// globalConfig takes a -config FILE (or --config, -config=FILE) given
// before the command, as in `splatd --config FILE jobs`: it becomes the
// default of the command's own -config, as $SPLATD_CONFIG does. ok is false
// when the flag has no value.
func globalConfig(c *cli, args []string) ([]string, *cli, bool) {
	if len(args) == 0 {
		return args, c, true
	}
	var file string
	switch a := args[0]; {
	case a == "-config" || a == "--config":
		if len(args) < 2 || args[1] == "" {
			return nil, c, false
		}
		file, args = args[1], args[2:]
	case strings.HasPrefix(a, "-config=") || strings.HasPrefix(a, "--config="):
		_, file, _ = strings.Cut(a, "=")
		if file == "" {
			return nil, c, false
		}
		args = args[1:]
	default:
		return args, c, true
	}
	getenv := c.getenv
	nc := *c
	nc.getenv = func(k string) string {
		if k == "SPLATD_CONFIG" {
			return file
		}
		return getenv(k)
	}
	return args, &nc, true
}

// asksHelp reports whether args ask for a command's help (before any "--").
func asksHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpWord(a) && a != "help" {
			return true
		}
	}
	return false
}

func isHelpWord(s string) bool {
	switch s {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: splatd COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintln(w, "\nEvery command takes -h. Commands that need the API or the state directory read")
	fmt.Fprintln(w, "-config FILE (after the command, or before it: splatd -config FILE jobs), else")
	fmt.Fprintln(w, "$SPLATD_CONFIG, else /etc/splatd/config.yaml; config.example.yaml is a start.")
	fmt.Fprintln(w, "Exit codes: 0 success, 1 failure, 2 usage error.")
}

// newFlags makes a FlagSet whose usage text names the command.
func newFlags(c *cli, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("splatd "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var synopsis, summary string
	for _, cmd := range commands() {
		if cmd.name == name {
			synopsis, summary = cmd.args, cmd.summary
		}
	}
	fs.Usage = func() {
		if c.describe != nil {
			c.describe(fs)
			return
		}
		fmt.Fprintf(c.stderr, "%s\n\n%s\n", strings.TrimSpace("usage: splatd "+name+" "+synopsis), summary)
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintln(c.stderr, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// errHelp means -h was given: the usage is printed and the exit code is 0.
var errHelp = flag.ErrHelp

// parseArgs parses flags that may stand before, between or after positional
// arguments, as users type them ("splatd checkpoints main -all"). Everything
// after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first non-flag; a preceding "--" ends flags for good.
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError prints a one-line reason and the command's usage; exit 2.
func usageError(c *cli, fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitUsage
}

// parseOrExit handles the common outcome of parseArgs: -h exits 0, a bad
// flag exits 2 (the flag package has printed why).
func parseOrExit(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	pos, err := parseArgs(fs, args)
	if errors.Is(err, errHelp) {
		return nil, exitOK, false
	}
	if err != nil {
		return nil, exitUsage, false
	}
	return pos, 0, true
}

// configFlag adds -config with its documented fallbacks.
func configFlag(c *cli, fs *flag.FlagSet) *string {
	def := c.getenv("SPLATD_CONFIG")
	if def == "" {
		def = "/etc/splatd/config.yaml"
	}
	return fs.String("config", def, "config file ($SPLATD_CONFIG, else /etc/splatd/config.yaml)")
}

func cmdVersion(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "version")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	fmt.Fprintf(c.stdout, "splatd %s (%s %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

// cmdConfig runs `splatd config check`: prints the resolved configuration,
// its notes and problems, and with -probe tries the network.
func cmdConfig(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "config")
	cfgPath := configFlag(c, fs)
	probe := fs.Bool("probe", false, "also try the network: the API is reachable and accepts the token (legacy: one signed-URL request; v1: GET /v1/me), and under legacy the storage host answers with a verified TLS certificate; nothing is uploaded")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] != "check" {
		return usageError(c, fs, "the only subcommand is check")
	}
	cfg, err := config.Load(*cfgPath, true)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage // an invalid config is exit 2 for every command
	}
	token, tokErr := api.LoadToken(cfg.API.TokenFile, c.getenv)
	fmt.Fprint(c.stdout, cfg.Redacted(token, tokErr))
	for _, n := range cfg.ProtocolNotes() {
		fmt.Fprintln(c.stderr, "note: "+n)
	}
	warnings, fatal := cfg.CheckEnvironment()
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "warning: %s\n", w)
	}
	for _, f := range fatal {
		fmt.Fprintf(c.stderr, "error: %s\n", f)
	}
	if tokErr != nil {
		fmt.Fprintln(c.stderr, tokErr)
		return exitFailure
	}
	if len(fatal) > 0 {
		return exitFailure
	}
	if !*probe {
		return exitOK
	}
	return probeConfig(ctx, c, cfg, token)
}

// probeConfig tries cfg's API with token and, under legacy, its storage
// host, and returns the exit code.
func probeConfig(ctx context.Context, c *cli, cfg *config.Config, token *api.Token) int {
	// splatd calls the API only when there is work, so /readyz cannot
	// vouch for a token before the first file; this can.
	client, err := daemon.NewClient(cfg, buildVersion(), token, nil, nil, cliLogger(c))
	var up api.Upload
	if err == nil {
		if cfg.API.Protocol == config.ProtocolV1 {
			_, err = client.Me(ctx)
		} else {
			up, err = client.SignedURL(ctx, "splatd-token-check.ply")
		}
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "probe of %s: %s%s\n", cfg.API.BaseURL, explainAPIError(err, token), config.ProbeHint(err))
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "# probe: %s is reachable and accepts the token read from %s\n", cfg.API.BaseURL, token.Origin())
	if up.URL == "" {
		// v1 signs part URLs only for an upload session, and a probe
		// creates none: storage is first reached by a real upload.
		fmt.Fprintln(c.stdout, "# probe: storage is reached at the first upload (api.protocol v1 signs URLs per upload session)")
		return exitOK
	}
	host, err := config.ProbeStorage(ctx, cfg, up.URL)
	if err != nil {
		fmt.Fprintf(c.stderr, "probe of the storage host %s: %v%s\n", host, err, config.ProbeHint(err))
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "# probe: the storage host %s is reachable (TLS verified); nothing was uploaded\n", host)
	return exitOK
}

// oneLine folds an error onto one line for tables and summaries.
// oneLine is s on one line, safe for a terminal (daemon.Shown): errors quote
// file names a folder writer chose.
func oneLine(s string) string { return state.Shown(strings.Join(strings.Fields(s), " ")) }

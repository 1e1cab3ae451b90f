package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// cmdSim runs `splatd sim`: the API and storage simulator, until ctx ends.
func cmdSim(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "sim")
	f := simFlags(c, fs)
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	s3, code, ok := f.check(c, fs)
	if !ok {
		return code
	}
	if *f.dir == "" {
		d, err := os.MkdirTemp("", "splatd-sim-")
		if err != nil {
			fmt.Fprintln(c.stderr, err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		*f.dir = d
	}
	kept, err := readSimKept(*f.dir)
	if err != nil {
		fmt.Fprintf(c.stderr, "sim: %v\n", err)
		return exitFailure
	}
	listenSet := flagSet(fs, "listen")
	if !listenSet && kept.Listen != "" {
		*f.listen = kept.Listen // the address the folder's config names
	}
	sim, err := startSim(c, f.options(c, kept, s3), !listenSet && kept.Listen != "")
	if err != nil {
		fmt.Fprintf(c.stderr, "sim: %v\n", err)
		return exitFailure
	}
	defer sim.Close()
	files, err := writeSimFiles(sim, *f.dir, *f.metricsListen, kept)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitFailure
	}
	printSim(c, sim, s3, f, files)
	if files.note != "" {
		fmt.Fprintln(c.stderr, files.note)
	}
	if err := sim.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(c.stderr, "sim: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// flagSet reports whether the command line set flag name of fs.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// check validates f's values and returns the S3 storage -storage names
// (nil: the built-in one); !ok means exit with code.
func (f *simOptions) check(c *cli, fs *flag.FlagSet) (s3 *apisim.S3, code int, ok bool) {
	if f.partSize <= 0 {
		return nil, usageError(c, fs, "-part-size must be positive"), false
	}
	for name, r := range map[string]float64{"error-rate": *f.errorRate, "storage-error-rate": *f.storageErrorRate} {
		if !(r >= 0 && r <= 1) {
			return nil, usageError(c, fs, "-%s must be between 0 and 1", name), false
		}
	}
	if *f.latency < 0 {
		return nil, usageError(c, fs, "-latency must not be negative"), false
	}
	if *f.storage == "" {
		return nil, 0, true
	}
	st, err := apisim.ParseS3URL(*f.storage)
	if err != nil {
		return nil, usageError(c, fs, "-storage: %v", err), false
	}
	if !flagSet(fs, "part-size") {
		f.partSize = apisim.MinS3PartSize
	}
	return &st, 0, true
}

// options is the simulator's options from f, kept and s3.
func (f *simOptions) options(c *cli, kept simKept, s3 *apisim.S3) apisim.Options {
	return apisim.Options{
		Listen:           *f.listen,
		Dir:              *f.dir,
		KeepCA:           true,
		Token:            kept.token,
		Window:           *f.window,
		ProcessingDelay:  *f.delay,
		PartSize:         int64(f.partSize),
		MaxUploadSize:    int64(f.maxUpload),
		SessionExpiry:    *f.expiry,
		StorageBandwidth: int64(f.bandwidth),
		S3:               s3,
		Limits:           f.limits,
		Classes:          f.classes,
		Faults:           f.faults(),
		Branches:         map[string]int{"main": 123, "demo": 7},
		Logger:           cliLogger(c),
	}
}

// startSim starts the simulator with o; when the address kept from the
// last start (orKept) is taken, it listens on another port instead.
func startSim(c *cli, o apisim.Options, orKept bool) (*apisim.Server, error) {
	sim, err := apisim.New(o)
	if err != nil && orKept {
		fmt.Fprintf(c.stderr, "sim: %s, the address of the last start, is not free (%v): listening on another port\n", o.Listen, err)
		o.Listen = "127.0.0.1:0"
		sim, err = apisim.New(o)
	}
	return sim, err
}

// simOptions are `splatd sim`'s flags.
type simOptions struct {
	listen, dir, metricsListen, storage *string
	window, delay, expiry, latency      *time.Duration
	partSize, maxUpload, bandwidth      byteSize
	limits, neighbour                   classCounts
	classes                             routeClasses
	errorRate, storageErrorRate         *float64
}

// classCounts is a repeatable CLASS=N flag (-limit strict=5).
type classCounts map[apisim.Class]int

func (m classCounts) String() string {
	var parts []string
	for _, c := range []apisim.Class{apisim.ClassNormal, apisim.ClassStrict, apisim.ClassAssets} {
		if n, ok := m[c]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", c, n))
		}
	}
	return strings.Join(parts, ",")
}

func (m classCounts) Set(v string) error {
	name, num, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 0 {
		return errors.New("want CLASS=N with N a whole number, 0 or more")
	}
	c, err := simClass(name)
	if err != nil {
		return err
	}
	m[c] = n
	if n == 0 {
		delete(m, c) // none: the default
	}
	return nil
}

// routeClasses is a repeatable ROUTE=CLASS flag (-class publish=strict).
type routeClasses map[string]apisim.Class

func (m routeClasses) String() string {
	var parts []string
	for r, c := range m {
		parts = append(parts, r+"="+string(c))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (m routeClasses) Set(v string) error {
	route, name, ok := strings.Cut(v, "=")
	if !ok || !slices.Contains(apisim.APIRoutes(), route) {
		return fmt.Errorf("want ROUTE=CLASS with ROUTE one of %s", strings.Join(apisim.APIRoutes(), ", "))
	}
	c, err := simClass(name)
	if err != nil {
		return err
	}
	m[route] = c
	return nil
}

func simClass(name string) (apisim.Class, error) {
	switch c := apisim.Class(name); c {
	case apisim.ClassNormal, apisim.ClassStrict, apisim.ClassAssets:
		return c, nil
	}
	return "", fmt.Errorf("unknown class %q (normal, strict, assets)", name)
}

func simFlags(c *cli, fs *flag.FlagSet) *simOptions {
	f := &simOptions{partSize: byteSize(apisim.DefaultPartSize)}
	f.listen = fs.String("listen", "127.0.0.1:0", "API listen address (storage gets another port on the same host)")
	f.dir = fs.String("dir", "", "folder for the CA file, the token, a ready config and stored objects (default: a temporary folder)")
	f.window = fs.Duration("window", time.Minute, "rate-limit window")
	f.delay = fs.Duration("processing-delay", 2*time.Second, "time from publish to the terminal task status")
	fs.Var(&f.partSize, "part-size", "v1: the partSize (`SIZE`) the server chooses for upload sessions; S3's minimum is 5MiB")
	fs.Var(&f.maxUpload, "max-upload-size", "v1: refuse uploads larger than `SIZE` with 413 (0: only the schema's 25 GB limit)")
	f.expiry = fs.Duration("session-expiry", apisim.DefaultSessionExpiry, "v1: life of an upload session that is not completed")
	fs.Var(&f.bandwidth, "storage-bandwidth", "cap on upload bytes per second (`SIZE`, e.g. 40MB) per storage TCP connection (0: none)")
	f.metricsListen = fs.String("metrics-listen", simMetricsListen, "metrics.listen of the config it writes: where the daemon run with it serves its status page and /metrics (a fixed port, so the page's address stays the same from one start to the next)")
	f.limits, f.neighbour, f.classes = classCounts{}, classCounts{}, routeClasses{}
	fs.Var(f.limits, "limit", "requests per -window of a rate-limit class (`CLASS=N`, repeatable; 0 or absent: the default, normal=240, strict=10, assets=120)")
	fs.Var(f.classes, "class", "put an API route in a rate-limit class (`ROUTE=CLASS`, repeatable, e.g. publish=strict or v1_complete=strict; default: every route normal)")
	fs.Var(f.neighbour, "neighbour", "another client of the token spends N requests of a class at the start of every window (`CLASS=N`, repeatable)")
	f.errorRate = fs.Float64("error-rate", 0, "probability (0 to 1) that an API request is answered 500 with an error body, having done nothing")
	f.storageErrorRate = fs.Float64("storage-error-rate", 0, "probability (0 to 1) that a storage PUT (object or part) is answered 503 SlowDown")
	f.latency = fs.Duration("latency", 0, "delay added before every request, API and storage, is handled")
	f.storage = fs.String("storage", c.getenv("SPLATD_SIM_STORAGE"), "a real S3 bucket as the storage (`s3://KEY:SECRET@HOST:PORT/BUCKET`, s3+https:// for TLS; default $SPLATD_SIM_STORAGE): presigned PUTs (legacy) and multipart uploads (v1, part size 5MiB or more) instead of the built-in storage")
	return f
}

// simFiles are what `splatd sim` writes into its folder for `run` to use.
// note, when set, says that a config.yaml the user changed was kept.
type simFiles struct{ token, config, inbox, state, note string }

// simKept is what `splatd sim` keeps in its folder (sim.json) to start
// again as it was: the API address its config names and the sha256 of
// the config.yaml it wrote last; token is the folder's token file.
type simKept struct {
	Listen string `json:"listen,omitempty"`
	Config string `json:"config_sha256,omitempty"`
	token  string
}

const simKeptFile = "sim.json"

// readSimKept reads what an earlier `splatd sim` left in dir (nothing
// from a new folder).
func readSimKept(dir string) (simKept, error) {
	var k simKept
	if b, err := os.ReadFile(filepath.Join(dir, simKeptFile)); err == nil {
		if err := json.Unmarshal(b, &k); err != nil {
			return k, fmt.Errorf("%s: %w", filepath.Join(dir, simKeptFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "token")); err == nil {
		k.token = strings.TrimSpace(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	return k, nil
}

// writeSimFiles writes the token and a complete config: a watch folder and
// a state directory of its own, so that `config check` passes and `run`
// works as printed. A config.yaml that differs from the one written last
// (the user's edits) is never overwritten: the new one goes beside it, as
// config.sim.yaml, and note says so.
func writeSimFiles(sim *apisim.Server, dir, metricsListen string, kept simKept) (simFiles, error) {
	f := simFiles{token: filepath.Join(dir, "token"), config: filepath.Join(dir, "config.yaml"),
		inbox: filepath.Join(dir, "inbox"), state: filepath.Join(dir, "state")}
	if err := os.WriteFile(f.token, []byte(sim.Token()+"\n"), 0o600); err != nil {
		return f, err
	}
	for _, d := range []string{f.inbox, f.state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return f, err
		}
	}
	cfg := fmt.Sprintf("api:\n  base_url: %s\n  ca_file: %s\n  token_file: %s\nwatch:\n  - path: %s\nstate_dir: %s\nsettle: 1s\npoll: {interval: 1s}\nmetrics: {listen: %q}\n",
		sim.URL(), sim.CAFile(), f.token, f.inbox, f.state, metricsListen)
	last := kept.Config
	if old, err := os.ReadFile(f.config); err == nil && string(old) != cfg && sha256Hex(old) != last {
		beside := filepath.Join(dir, "config.sim.yaml")
		if err := os.WriteFile(beside, []byte(cfg), 0o600); err != nil {
			return f, err
		}
		f.note = fmt.Sprintf("sim: %s differs from the config the simulator wrote: kept as it is; the simulator's config is in %s", f.config, beside)
		if !strings.Contains(string(old), sim.URL()) {
			f.note += " (the base_url is " + sim.URL() + " now: copy it over)"
		}
		return f, writeSimKept(dir, sim, kept)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		return f, err
	}
	kept.Config = sha256Hex([]byte(cfg))
	return f, writeSimKept(dir, sim, kept)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func writeSimKept(dir string, sim *apisim.Server, kept simKept) error {
	kept.Listen = strings.TrimPrefix(sim.URL(), "https://")
	b, err := json.MarshalIndent(kept, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, simKeptFile), append(b, '\n'), 0o600)
}

// faults are the simulator's failures the flags ask for.
func (f *simOptions) faults() apisim.Faults {
	var ft apisim.Faults
	if *f.errorRate > 0 {
		ft.ErrorRate = map[string]float64{}
		for _, r := range apisim.APIRoutes() {
			ft.ErrorRate[r] = *f.errorRate
		}
	}
	ft.StorageErrorRate = *f.storageErrorRate
	ft.Latency = *f.latency
	if len(f.neighbour) > 0 {
		ft.Neighbour = f.neighbour
	}
	return ft
}

// printSim prints where everything is and what to try.
func printSim(c *cli, sim *apisim.Server, s3 *apisim.S3, f *simOptions, files simFiles) {
	stURL := sim.StorageURL()
	if s3 != nil {
		stURL = "S3 " + s3.String() // without the keys
	}
	fmt.Fprintf(c.stdout, "base_url:   %s\nstorage:    %s\nca_file:    %s\ntoken:      %s\ntoken_file: %s\nconfig:     %s\nwatch:      %s\nstate_dir:  %s\nbranches:   main (123 checkpoints), demo (7)\n",
		sim.URL(), stURL, sim.CAFile(), sim.Token(), files.token, files.config, files.inbox, files.state)
	bw := "none"
	if f.bandwidth > 0 {
		bw = f.bandwidth.String() + "/s per connection"
	}
	fmt.Fprintf(c.stdout, "v1 API:     %s/api/supersplat (partSize %s)\nbandwidth:  %s\n", sim.URL(), f.partSize, bw)
	fmt.Fprintf(c.stdout, "limits:     %s per %s%s\n", simLimits(f), *f.window, simFaults(f))
	page := statusPageURL(*f.metricsListen)
	fmt.Fprintf(c.stdout, "status:     %s (the status page of `run` with this config; /api/status, /api/jobs, /metrics beside it)\n", page)
	self := os.Args[0] // as the user typed it (bin/splatd after make build)
	cfgFile := files.config
	fmt.Fprintf(c.stdout, "\ntry:  %s config check -config %s -probe\n      %s run -config %s    (then drop .ply files into %s)\n      open %s    (while run runs)\n      %s checkpoints -config %s main -limit 5\n      %s publish -config %s FILE.ply\n",
		self, cfgFile, self, cfgFile, files.inbox, page, self, cfgFile, self, cfgFile)
	fmt.Fprintln(c.stdout, "(Ctrl-C stops the simulator)")
}

// simLimits is "normal 240, strict 10 (publish, v1_complete), assets 120".
func simLimits(f *simOptions) string {
	var parts []string
	for _, c := range []apisim.Class{apisim.ClassNormal, apisim.ClassStrict, apisim.ClassAssets} {
		n, ok := f.limits[c]
		if !ok || n <= 0 {
			n = map[apisim.Class]int{apisim.ClassNormal: apisim.DefaultNormalLimit, apisim.ClassStrict: apisim.DefaultStrictLimit, apisim.ClassAssets: apisim.DefaultAssetsLimit}[c]
		}
		s := fmt.Sprintf("%s %d", c, n)
		var routes []string
		for r, rc := range f.classes {
			if rc == c && c != apisim.ClassNormal {
				routes = append(routes, r)
			}
		}
		if len(routes) > 0 {
			slices.Sort(routes)
			s += " (" + strings.Join(routes, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// simFaults is "; faults: ..." for the failures asked for, "" for none.
func simFaults(f *simOptions) string {
	var parts []string
	if *f.errorRate > 0 {
		parts = append(parts, fmt.Sprintf("API errors %g%%", *f.errorRate*100))
	}
	if *f.storageErrorRate > 0 {
		parts = append(parts, fmt.Sprintf("storage errors %g%%", *f.storageErrorRate*100))
	}
	if *f.latency > 0 {
		parts = append(parts, fmt.Sprintf("latency %s", *f.latency))
	}
	if len(f.neighbour) > 0 {
		parts = append(parts, "a neighbour spends "+strings.ReplaceAll(f.neighbour.String(), "=", " ")+" per window")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; faults: " + strings.Join(parts, ", ")
}

// simMetricsListen is the metrics.listen of the config `splatd sim` writes:
// a fixed port, one above the daemon's default (9464), so that the sim's
// daemon does not take the port of an installed one.
const simMetricsListen = "127.0.0.1:9465"

// statusPageURL is the status page's address on a metrics.listen address.
func statusPageURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen + "/"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// byteSize is a flag value in bytes, in the program's one unit rule
// (state.ParseSize): "1048576", "5MiB", "10M", "40MB".
type byteSize int64

func (b *byteSize) Set(s string) error {
	n, err := state.ParseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func (b byteSize) String() string { return state.FormatSize(int64(b)) }

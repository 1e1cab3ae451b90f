// Package config is splatd's configuration file: its schema, the defaults,
// the validation that names each bad key, the diff a reload applies, and the
// publish parameters of a file (ParamsFor), which the daemon, the dry run
// and `splatd publish` all take from here. config.example.yaml lists every
// key; docs/architecture.md holds the contract.
package config

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Config is the YAML configuration file. Every key and its default is
// documented in config.example.yaml; docs/architecture.md holds the contract.
type Config struct {
	API            API      `yaml:"api"`
	Upload         Upload   `yaml:"upload"`
	Watch          []Watch  `yaml:"watch"`
	Settle         Duration `yaml:"settle"`
	RescanInterval Duration `yaml:"rescan_interval"`
	StateDir       string   `yaml:"state_dir"`
	Workers        int      `yaml:"workers"`
	Publish        Publish  `yaml:"publish"`
	Poll           Poll     `yaml:"poll"`
	After          After    `yaml:"after"`
	Notify         Notify   `yaml:"notify"`
	Metrics        Metrics  `yaml:"metrics"`
	Status         Status   `yaml:"status"`
	Log            Log      `yaml:"log"`
	Fleet          Fleet    `yaml:"fleet"`

	// IncompleteTimeout is state.Policy.IncompleteTimeout; 0 here waits for
	// ever.
	IncompleteTimeout Duration `yaml:"incomplete_timeout"`
}

// Fleet names this daemon among daemons sharing one folder.
type Fleet struct {
	// ID is this daemon's identity in the claim order (a rendezvous hash
	// of each file's key and the identity). Empty: the host name and the
	// absolute state_dir, distinct for every daemon that has its own
	// state. Set it when that pair is not stable, e.g. a pod whose host
	// name changes at every restart.
	ID string `yaml:"id"`
}

// FleetIdentity is the daemon's identity in the claim order.
func (c *Config) FleetIdentity() string {
	if c.Fleet.ID != "" {
		return c.Fleet.ID
	}
	host, _ := os.Hostname()
	dir, err := filepath.Abs(c.StateDir)
	if err != nil {
		dir = c.StateDir
	}
	return host + ":" + dir
}

// API says where the API is and how to authenticate to it.
type API struct {
	BaseURL   string   `yaml:"base_url"`
	TokenFile string   `yaml:"token_file"`
	CAFile    string   `yaml:"ca_file"`
	Timeout   Duration `yaml:"timeout"`
	Protocol  string   `yaml:"protocol"` // legacy | v1
	// MaxServerWait caps every delay the API or storage asks for
	// (Retry-After, a 429's reset): state.Policy.MaxServerWait.
	MaxServerWait Duration `yaml:"max_server_wait"`
	// ViewerHosts are the hosts a viewer link may point to (host or
	// host:port); none: api.base_url's host, and for the public service
	// superspl.at too (viewer.go).
	ViewerHosts []string `yaml:"viewer_hosts"`
	// Token exists only so that an inline token is refused with a message
	// that says where to put it, instead of "unknown key".
	Token string `yaml:"token,omitempty"`
}

// Status guards the status endpoints (/api/status, /api/jobs, the
// page at /) on a listener that is not a loopback address.
type Status struct {
	// TokenFile holds the bearer token those requests must carry; with
	// none, they are off on such a listener. Re-read at every request.
	TokenFile string `yaml:"token_file"`
	// RemoteActions lets the page's actions (retry, cancel, republish,
	// forget) come from other addresses than this machine's loopback.
	RemoteActions bool `yaml:"remote_actions"`
}

// Upload tunes the storage uploads.
type Upload struct {
	ParallelParts int    `yaml:"parallel_parts"` // v1: part PUTs in flight per job
	Bandwidth     string `yaml:"bandwidth"`      // api.ParseBandwidth: a rate or a weekly timetable
}

// Watch is one watched folder.
type Watch struct {
	Path      string   `yaml:"path"`
	Recursive *bool    `yaml:"recursive"`
	Include   []string `yaml:"include"`
	Exclude   []string `yaml:"exclude"`
	// ExcludeDefaults keeps the default excludes (defaultExclude) before
	// Exclude's own patterns; false drops them. Default true.
	ExcludeDefaults *bool     `yaml:"exclude_defaults"`
	Mode            string    `yaml:"mode"`
	PollInterval    Duration  `yaml:"poll_interval"`
	FollowSymlinks  bool      `yaml:"follow_symlinks"`
	MinSize         ByteSize  `yaml:"min_size"` // 0: no bound
	MaxSize         *ByteSize `yaml:"max_size"` // 0: no bound; absent: DefaultMaxSize
	MinAge          Duration  `yaml:"min_age"`  // by mtime; 0: off
	// Publish and After are laid over the global blocks, key by key, for
	// this folder's files (folders.go).
	Publish sidecar.Overrides `yaml:"publish,omitempty"`
	After   FolderAfter       `yaml:"after,omitempty"`

	given string // path as written, before validate made it absolute (config check warns)
}

// Publish holds the defaults of every publish call; a per-file sidecar
// <stem>.splat.yaml overrides them.
type Publish struct {
	Title       string         `yaml:"title"`
	Description string         `yaml:"description"`
	Listed      bool           `yaml:"listed"`
	Format      string         `yaml:"format"`
	OnUncertain string         `yaml:"on_uncertain"`
	Settings    map[string]any `yaml:"settings"`
	// Encode "sog" uploads a SOG encoded locally from each PLY in place of
	// the PLY (far fewer bytes on a slow uplink); "off" (the default)
	// uploads every file as it is.
	Encode string `yaml:"encode"`
}

// Params are the configured publish parameters, the defaults that
// sidecar.Resolve renders for each file (Title is the template).
func (p Publish) Params() state.PublishParams {
	return state.PublishParams{Title: p.Title, Description: p.Description, Listed: p.Listed, Format: p.Format, Settings: p.Settings, Encode: sidecar.EncodeValue(p.Encode)}
}

// Poll paces the polling of a published splat until processing ends.
type Poll struct {
	Interval    Duration `yaml:"interval"`
	MaxInterval Duration `yaml:"max_interval"`
	Timeout     Duration `yaml:"timeout"`
}

// After says what happens to a file once its job is finished.
type After struct {
	OnSuccess  string `yaml:"on_success"`
	SuccessDir string `yaml:"success_dir"`
	OnFailure  string `yaml:"on_failure"`
	FailureDir string `yaml:"failure_dir"`
	Receipt    bool   `yaml:"receipt"`
	// Exec is a command and its arguments (no shell) run with the receipt
	// as JSON on stdin when a job is final; empty runs nothing.
	Exec        []string `yaml:"exec"`
	ExecTimeout Duration `yaml:"exec_timeout"`
}

// Metrics is the /metrics, /healthz and /readyz listener.
type Metrics struct {
	Listen string `yaml:"listen"`
}

// Log sets the level and format of the logs written to stderr.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Duration is a time.Duration written in Go syntax ("5s", "2h") in YAML.
type Duration time.Duration

// UnmarshalYAML parses Go duration syntax and nothing else, so that "5"
// (seconds? nanoseconds?) is an error rather than a guess.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("want a duration such as 5s or 2h")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (want e.g. 5s, 1m30s, 2h)", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML prints the duration the way it is written.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Defaults of the keys that may be left out; config.example.yaml lists the same.
var (
	defaultInclude = []string{"*.ply", "*.sog", "*.spz", "meta.json"}
	defaultExclude = []string{".*", "*.tmp", "*.part", "*~"}
)

func defaultSettings() map[string]any {
	return map[string]any{
		"camera": map[string]any{
			"fov":       65,
			"position":  []any{2, 2, 2},
			"target":    []any{0, 0, 0},
			"startAnim": "none",
			"animTrack": nil,
		},
		"background": map[string]any{"color": []any{0.4, 0.4, 0.4}},
		"animTracks": []any{},
	}
}

// Default is what an empty file means. The pool's keys come from its one
// table, uploader.Defaults.
func Default() Config {
	pool := uploader.Defaults()
	return Config{
		API: API{
			BaseURL:       "https://playcanvas.com",
			Timeout:       Duration(60 * time.Second),
			Protocol:      ProtocolLegacy,
			MaxServerWait: Duration(pool.Timing.MaxServerWait),
		},
		Upload:         Upload{ParallelParts: pool.ParallelParts, Bandwidth: "0"},
		Settle:         Duration(pool.Timing.Settle),
		RescanInterval: Duration(5 * time.Minute),
		StateDir:       "/var/lib/splatd",
		Workers:        pool.Workers,
		Publish: Publish{
			Title:       "{{.Stem}}",
			Format:      "sog",
			OnUncertain: "republish",
			Encode:      "off",
			Settings:    defaultSettings(),
		},
		Poll: Poll{
			Interval:    Duration(pool.Timing.Poll.Interval),
			MaxInterval: Duration(pool.Timing.Poll.MaxInterval),
			Timeout:     Duration(pool.Timing.Poll.Timeout),
		},
		After:   After{OnSuccess: "keep", OnFailure: "keep", Receipt: true, Exec: []string{}, ExecTimeout: Duration(30 * time.Second)},
		Metrics: Metrics{Listen: "127.0.0.1:9464"},
		Log:     Log{Level: "info", Format: "auto"},

		IncompleteTimeout: Duration(pool.Timing.IncompleteTimeout),
	}
}

// Errors is every problem found in a config file, one per key.
type Errors []string

func (e Errors) Error() string {
	if len(e) == 1 {
		return e[0]
	}
	return fmt.Sprintf("%d problems:\n  %s", len(e), strings.Join(e, "\n  "))
}

// Load reads, decodes and validates a config file. forRun adds the
// checks that only the daemon needs (watch folders, state_dir).
func Load(path string, forRun bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: %w\n(give one with -config FILE or $SPLATD_CONFIG; start from config.example.yaml, or run `splatd sim`, which writes a ready one)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	var errs Errors
	switch {
	case errors.As(err, &errs):
		// Keys that decoded are still checked, so that one pass shows
		// every problem (the bad ones keep their defaults meanwhile).
		partial := Default()
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 {
			var ignore Errors
			decodeStrict(doc.Content[0], reflect.ValueOf(&partial).Elem(), "", &ignore)
		}
		errs = append(errs, partial.Validate(forRun)...)
		return nil, fmt.Errorf("config %s: %w", path, errs)
	case err != nil:
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if errs := cfg.Validate(forRun); len(errs) > 0 {
		return nil, fmt.Errorf("config %s: %w", path, errs)
	}
	return cfg, nil
}

// Parse decodes YAML over the defaults. Unknown keys and badly typed
// values are reported with their key path and line.
func Parse(data []byte) (*Config, error) {
	cfg := Default()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &cfg, nil // an empty file: all defaults
	}
	var errs Errors
	decodeStrict(doc.Content[0], reflect.ValueOf(&cfg).Elem(), "", &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	// publish.settings is merged key by key over the default settings, as a
	// sidecar's are over the config's: `settings: {camera: {fov: 50}}`
	// changes the field of view and keeps the rest.
	merged := defaultSettings()
	sidecar.MergeSettings(merged, cfg.Publish.Settings)
	cfg.Publish.Settings = merged
	return &cfg, nil
}

// decodeStrict walks a YAML node into v, refusing keys the struct does not
// have. yaml.v3's KnownFields reports "field x not found in type main.y",
// which names a Go type instead of the key path a user wrote; this walk
// names the path ("watch[1].mode").
func decodeStrict(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	at := func(msg string, line int) {
		p := path
		if p == "" {
			p = "(top level)"
		}
		*errs = append(*errs, fmt.Sprintf("%s: %s (line %d)", p, msg, line))
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(time.Time{}) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.MappingNode {
			at("want a mapping of keys", n.Line)
			return
		}
		fields := map[string]int{}
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = i
			}
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			child := joinPath(path, key.Value)
			idx, ok := fields[key.Value]
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s: unknown key (line %d)", child, key.Line))
				continue
			}
			// A key given twice (a block appended to a file that had it)
			// would have the second replace or merge into the first.
			if first, dup := seen[key.Value]; dup {
				*errs = append(*errs, fmt.Sprintf("%s: given twice (lines %d and %d); keep one", child, first, key.Line))
				continue
			}
			seen[key.Value] = key.Line
			decodeStrict(val, v.Field(idx), child, errs)
		}
		return
	}
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.SequenceNode {
			at("want a list", n.Line)
			return
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			decodeStrict(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i), errs)
		}
		v.Set(out)
		return
	}
	// A leaf (scalar, list of scalars, free-form map such as settings).
	fresh := reflect.New(v.Type())
	if err := n.Decode(fresh.Interface()); err != nil {
		at(cleanYAMLError(err), n.Line)
		return
	}
	v.Set(fresh.Elem())
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// cleanYAMLError turns "yaml: unmarshal errors:\n  line 3: cannot unmarshal
// !!str `x` into int" into "cannot unmarshal !!str `x` into int".
func cleanYAMLError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			msg = rest
		}
		return msg
	}
	return err.Error()
}

// validate checks every key and fills per-entry defaults. It returns all
// problems at once so that a user fixes a file in one pass. The sections go
// in the file's order, which is the order of the messages; validateWatch
// runs before validateAfterDirs, which compares against the absolute watch
// paths it leaves.
func (c *Config) Validate(forRun bool) Errors {
	var errs Errors
	errs = append(errs, c.validateAPI()...)
	errs = append(errs, c.validateUpload()...)
	errs = append(errs, c.validateWatch(forRun)...)
	errs = append(errs, c.validateDaemon(forRun)...)
	errs = append(errs, c.validatePublish()...)
	errs = append(errs, c.validatePoll()...)
	errs = append(errs, c.validateAfter()...)
	errs = append(errs, c.validateAfterDirs()...)
	errs = append(errs, c.validateMetrics()...)
	errs = append(errs, c.validateLog()...)
	errs = append(errs, c.validateFolders()...)
	errs = append(errs, c.validateNotify()...)
	return errs
}

// add records the problem of one key.
func (e *Errors) add(key, format string, args ...any) {
	*e = append(*e, key+": "+fmt.Sprintf(format, args...))
}

// validateAPI checks the api section but api.protocol (validateUpload).
func (c *Config) validateAPI() Errors {
	var errs Errors
	if c.API.Token != "" {
		errs.add("api.token", "an inline token is not accepted (the config file is not a secret store); "+
			"put the token in the file named by api.token_file, in the SPLATD_TOKEN environment variable, "+
			"or in the systemd credential splatd-token")
	}
	if c.API.BaseURL == "" {
		errs.add("api.base_url", "is required")
	} else if u, err := url.Parse(c.API.BaseURL); err != nil {
		errs.add("api.base_url", "not a URL: %v", err)
	} else if u.Scheme != "https" {
		errs.add("api.base_url", "scheme must be https (got %q)", u.Scheme)
	} else if u.Host == "" {
		errs.add("api.base_url", "has no host")
	} else if u.RawQuery != "" || u.Fragment != "" {
		errs.add("api.base_url", "must not carry a query or fragment")
	}
	if c.API.Timeout.D() <= 0 {
		errs.add("api.timeout", "must be positive")
	}
	if c.API.MaxServerWait.D() < time.Second {
		errs.add("api.max_server_wait", "must be at least 1s (got %s)", c.API.MaxServerWait.D())
	}
	for _, h := range c.API.ViewerHosts {
		if h == "" || strings.ContainsAny(h, "/?#@ ") {
			errs.add("api.viewer_hosts", "%q is not a host or host:port (no scheme, no path)", h)
		}
	}
	if c.API.CAFile != "" {
		if _, err := c.RootCAs(); err != nil {
			errs.add("api.ca_file", "%v", strings.TrimPrefix(err.Error(), "api.ca_file: "))
		}
	}
	return errs
}

// validateWatch checks the watch list (a daemon needs one folder at least)
// and fills each entry's defaults; the folders' own filters and blocks are
// validateFolders'.
func (c *Config) validateWatch(forRun bool) Errors {
	var errs Errors
	if forRun && len(c.Watch) == 0 {
		errs.add("watch", "at least one folder is required")
	}
	for i := range c.Watch {
		errs = append(errs, c.Watch[i].Validate(fmt.Sprintf("watch[%d]", i))...)
	}
	return errs
}

// effectiveExclude is the exclude list a watch entry acts on: the default
// temporary names (unless exclude_defaults is false), then its own
// patterns, each once. Never nil: the watcher reads nil as its defaults.
func effectiveExclude(own []string, defaults *bool) []string {
	out := []string{}
	if defaults == nil || *defaults {
		out = append(out, defaultExclude...)
	}
	for _, p := range own {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// validate checks the watch entry at key, makes its path absolute (keeping
// it as given) and fills its defaults.
func (w *Watch) Validate(key string) Errors {
	var errs Errors
	if w.given == "" {
		w.given = w.Path
	}
	if w.Path == "" {
		errs.add(key+".path", "is required")
	} else if abs, err := filepath.Abs(w.Path); err == nil {
		w.Path = abs
	}
	if w.Recursive == nil {
		t := true
		w.Recursive = &t
	}
	if w.MaxSize == nil {
		m := DefaultMaxSize
		if w.MinSize > m {
			m = 0 // a folder of files above the default bound asked for them
		}
		w.MaxSize = &m
	}
	if w.Include == nil {
		w.Include = append([]string(nil), defaultInclude...)
	}
	w.Exclude = effectiveExclude(w.Exclude, w.ExcludeDefaults)
	if w.ExcludeDefaults == nil {
		t := true
		w.ExcludeDefaults = &t
	}
	for _, p := range append(append([]string(nil), w.Include...), w.Exclude...) {
		if _, err := filepath.Match(p, "x"); err != nil {
			errs.add(key+".include/exclude", "bad pattern %q: %v", p, err)
		}
	}
	switch w.Mode {
	case "":
		w.Mode = "notify"
	case "notify", "poll":
	default:
		errs.add(key+".mode", "must be notify or poll (got %q)", w.Mode)
	}
	if w.PollInterval == 0 {
		w.PollInterval = Duration(10 * time.Second)
	} else if w.PollInterval < 0 {
		errs.add(key+".poll_interval", "must be positive")
	}
	return errs
}

// validateDaemon checks the top-level keys: timing, state_dir (a daemon
// needs one) and workers.
func (c *Config) validateDaemon(forRun bool) Errors {
	var errs Errors
	if c.Settle < 0 {
		errs.add("settle", "must not be negative")
	}
	if c.RescanInterval < 0 {
		errs.add("rescan_interval", "must not be negative (0 turns the periodic rescan off)")
	}
	if c.IncompleteTimeout < 0 {
		errs.add("incomplete_timeout", "must not be negative (0 waits for ever)")
	}
	if forRun && c.StateDir == "" {
		errs.add("state_dir", "is required")
	}
	if c.Workers < 1 || c.Workers > 64 {
		errs.add("workers", "must be between 1 and 64 (got %d)", c.Workers)
	}
	if len(c.Fleet.ID) > 200 || strings.ContainsFunc(c.Fleet.ID, unicode.IsControl) {
		errs.add("fleet.id", "must be at most 200 characters, none of them control characters")
	}
	return errs
}

// validatePublish checks the global publish block.
func (c *Config) validatePublish() Errors {
	var errs Errors
	if msg := titleProblem(c.Publish.Title); msg != "" {
		errs.add("publish.title", "%s", msg)
	}
	switch c.Publish.Format {
	case "sog", "compressed.ply":
	default:
		errs.add("publish.format", "must be sog or compressed.ply (got %q); it is the output format, not the uploaded file's", c.Publish.Format)
	}
	switch c.Publish.OnUncertain {
	case "republish", "hold":
	default:
		errs.add("publish.on_uncertain", "must be republish or hold (got %q)", c.Publish.OnUncertain)
	}
	if !sidecar.ValidEncode(c.Publish.Encode) {
		errs.add("publish.encode", "must be sog or off (got %q)", c.Publish.Encode)
	}
	if err := sidecar.CheckSettings(c.Publish.Settings); err != nil {
		errs.add("publish.settings", "%v", err)
	}
	return errs
}

// validatePoll checks the poll section.
func (c *Config) validatePoll() Errors {
	var errs Errors
	if c.Poll.Interval.D() <= 0 {
		errs.add("poll.interval", "must be positive")
	}
	if c.Poll.MaxInterval.D() < c.Poll.Interval.D() {
		errs.add("poll.max_interval", "must be at least poll.interval (%s)", c.Poll.Interval.D())
	}
	if c.Poll.Timeout.D() <= 0 {
		errs.add("poll.timeout", "must be positive")
	}
	return errs
}

// validateAfter checks the global after-actions and that a move has its
// folder.
func (c *Config) validateAfter() Errors {
	var errs Errors
	switch c.After.OnSuccess {
	case "keep", "delete":
	case "move":
		if c.After.SuccessDir == "" {
			errs.add("after.success_dir", "is required when after.on_success is move")
		}
	default:
		errs.add("after.on_success", "must be keep, delete or move (got %q)", c.After.OnSuccess)
	}
	switch c.After.OnFailure {
	case "keep":
	case "move":
		if c.After.FailureDir == "" {
			errs.add("after.failure_dir", "is required when after.on_failure is move")
		}
	default:
		errs.add("after.on_failure", "must be keep or move (got %q)", c.After.OnFailure)
	}
	return errs
}

// validateAfterDirs makes after.success_dir and after.failure_dir absolute
// and refuses one inside a watched folder (c.Watch paths already absolute).
func (c *Config) validateAfterDirs() Errors {
	var errs Errors
	for _, d := range []struct{ key, dir string }{{"after.success_dir", c.After.SuccessDir}, {"after.failure_dir", c.After.FailureDir}} {
		if d.dir == "" {
			continue
		}
		abs, err := filepath.Abs(d.dir)
		if err != nil {
			errs.add(d.key, "%v", err)
			continue
		}
		for i, w := range c.Watch {
			if _, in := trustfs.Within(w.Path, abs); in {
				// A moved file would be found again and moved again.
				errs.add(d.key, "%s is inside watch[%d].path %s; choose a folder outside every watched folder", abs, i, w.Path)
			}
		}
		if d.key == "after.success_dir" {
			c.After.SuccessDir = abs
		} else {
			c.After.FailureDir = abs
		}
	}
	return errs
}

// validateMetrics checks the metrics listener.
func (c *Config) validateMetrics() Errors {
	var errs Errors
	if c.Metrics.Listen != "" {
		_, port, err := net.SplitHostPort(c.Metrics.Listen)
		if n, perr := strconv.ParseUint(port, 10, 16); err == nil && (perr != nil || n > 65535) {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
		if err != nil {
			errs.add("metrics.listen", "want host:port or empty to turn it off: %v", err)
		}
	}
	return errs
}

// logLevels are log.level's values (zerolog takes more: fatal, panic,
// disabled, numbers; none of them is a level to run a daemon at).
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// validateLog checks the log section.
func (c *Config) validateLog() Errors {
	var errs Errors
	if !slices.Contains(logLevels, c.Log.Level) {
		errs.add("log.level", "must be one of %s (got %q)", strings.Join(logLevels, ", "), c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "json", "console":
	default:
		errs.add("log.format", "must be auto, json or console (got %q)", c.Log.Format)
	}
	return errs
}

// RootCAs returns the system roots plus api.ca_file, for the API and storage hosts.
func (c *Config) RootCAs() (*x509.CertPool, error) {
	if c.API.CAFile == "" {
		return nil, nil // nil means the system roots
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pem, err := os.ReadFile(c.API.CAFile)
	if err != nil {
		return nil, fmt.Errorf("api.ca_file: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("api.ca_file: %s holds no PEM certificate", c.API.CAFile)
	}
	return pool, nil
}

// redacted renders the effective config as YAML for `config check`. The token
// itself is never in Config, so there is nothing to hide but its source.
func (c *Config) Redacted(tok *api.Token, tokenErr error) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	_ = enc.Encode(c)
	switch {
	case tokenErr != nil:
		fmt.Fprintf(&b, "# token: NOT FOUND: %v\n", tokenErr)
	case tok != nil:
		fmt.Fprintf(&b, "# token: <redacted>, read from %s\n", tok.Origin())
	}
	return b.String()
}

// Package config is splatd's configuration file: its schema, the defaults,
// the validation that names each bad key, the diff a reload applies, and the
// publish parameters of a file (ParamsFor), which the daemon, the dry run
// and `splatd publish` all take from here. config.example.yaml lists every
// key; docs/architecture.md holds the contract.
package config

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/sidecar"
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

// logLevels are log.level's values (zerolog takes more: fatal, panic,
// disabled, numbers; none of them is a level to run a daemon at).
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

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

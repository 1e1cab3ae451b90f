package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/notify"
	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher"
	"github.com/splatd/splatd/watcher/trustfs"
)

// FolderAfter is a watch entry's own after block, laid over the global one
// key by key. An empty exec list turns a global command off for the folder.
type FolderAfter struct {
	OnSuccess   *string   `yaml:"on_success,omitempty"`
	SuccessDir  *string   `yaml:"success_dir,omitempty"`
	OnFailure   *string   `yaml:"on_failure,omitempty"`
	FailureDir  *string   `yaml:"failure_dir,omitempty"`
	Receipt     *bool     `yaml:"receipt,omitempty"`
	Exec        []string  `yaml:"exec,omitempty"`
	ExecTimeout *Duration `yaml:"exec_timeout,omitempty"`
}

// Notify says where final jobs are announced (after.exec is the
// other channel).
type Notify struct {
	// Webhook receives a JSON event per final job: https, or http on a
	// loopback address. "" turns it off.
	Webhook WebhookURL `yaml:"webhook"`
	// WebhookHeadersFile holds extra request headers, one "Name: value" a
	// line (the receiver's own Authorization), kept out of the config.
	WebhookHeadersFile string `yaml:"webhook_headers_file"`
}

// WebhookURL is a webhook address. Chat webhooks carry their secret in the
// path, so `config check` prints only the scheme and host.
type WebhookURL string

// MarshalYAML hides everything after the host.
func (u WebhookURL) MarshalYAML() (any, error) {
	if u == "" {
		return "", nil
	}
	p, err := url.Parse(string(u))
	if err != nil || p.Host == "" {
		return "<redacted>", nil
	}
	return p.Scheme + "://" + p.Host + "/<redacted>", nil
}

// ByteSize is a size in bytes written as 1048576, 512KiB, 20GiB or 5MB in
// YAML, in the program's one unit rule (state.ParseSize).
type ByteSize int64

// DefaultMaxSize is a watch entry's max_size when it has none: a larger file
// is skipped (one log line), not hashed or uploaded; `max_size: 0` removes
// the bound. 32 GiB holds the largest captures (about 140 million splats as
// PLY) and bounds the hours of hashing a sparse file could cost.
const DefaultMaxSize = ByteSize(32 << 30)

// UnmarshalYAML parses a size; a negative one is an error.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a size such as 512KiB or 20GiB")
	}
	v, err := state.ParseSize(n.Value)
	if err != nil {
		return err
	}
	*b = ByteSize(v)
	return nil
}

// MarshalYAML prints the size in the largest binary unit that divides it.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

func (b ByteSize) String() string { return state.FormatSize(int64(b)) }

// publishFor returns the publish defaults of a watch entry's files: the
// global block with the entry's own laid over it. Folder .splat.yaml files
// and sidecars are applied later, per file (sidecar.Resolve).
func (c *Config) PublishFor(w Watch) state.PublishParams {
	p := c.Publish.Params()
	settings := map[string]any{}
	sidecar.MergeSettings(settings, p.Settings) // a deep copy: folders never share maps
	sidecar.MergeSettings(settings, w.Publish.Settings)
	p.Settings = settings
	if w.Publish.Title != nil {
		p.Title = *w.Publish.Title
	}
	if w.Publish.Description != nil {
		p.Description = *w.Publish.Description
	}
	if w.Publish.Listed != nil {
		p.Listed = *w.Publish.Listed
	}
	if w.Publish.Format != nil {
		p.Format = *w.Publish.Format
	}
	if w.Publish.Encode != nil {
		p.Encode = sidecar.EncodeValue(*w.Publish.Encode)
	}
	return p
}

// afterFor returns the after block of a watch entry's files.
func (c *Config) AfterFor(w Watch) After {
	a := c.After
	o := w.After
	if o.OnSuccess != nil {
		a.OnSuccess = *o.OnSuccess
	}
	if o.SuccessDir != nil {
		a.SuccessDir = *o.SuccessDir
	}
	if o.OnFailure != nil {
		a.OnFailure = *o.OnFailure
	}
	if o.FailureDir != nil {
		a.FailureDir = *o.FailureDir
	}
	if o.Receipt != nil {
		a.Receipt = *o.Receipt
	}
	if o.Exec != nil {
		a.Exec = o.Exec
	}
	if o.ExecTimeout != nil {
		a.ExecTimeout = *o.ExecTimeout
	}
	return a
}

// AfterOfRoot returns the after block of the jobs of watch root (a job's
// Root): its watch entry's, or the global one for a root of no entry, as
// the daemon picks its after-actions.
func (c *Config) AfterOfRoot(root string) After {
	for _, w := range c.Watch {
		if w.Path == root {
			return c.AfterFor(w)
		}
	}
	return c.After
}

// titleProblem says what is wrong with a title template, or "".
func titleProblem(title string) string {
	// Parsing alone accepts {{.Stemm}}; every job would then fail. The
	// check renders with the bounds a folder's title gets (no loops).
	if err := sidecar.ParseTitle(title); err != nil {
		return fmt.Sprintf("bad template: %v", err)
	}
	if err := sidecar.CheckTitle(title); err != nil {
		return fmt.Sprintf("%v (fields: .Stem .Name .Dir .RelDir .ModTime)", err)
	}
	return ""
}

// validateFolders checks each watch entry's filters and its own publish and
// after blocks; errors name the key path (watch[1].publish.format).
func (c *Config) validateFolders() Errors {
	var errs Errors
	for i := range c.Watch {
		w := &c.Watch[i]
		key := fmt.Sprintf("watch[%d]", i)
		if w.MaxSize != nil && *w.MaxSize > 0 && w.MinSize > *w.MaxSize {
			errs.add(key+".max_size", "must be at least min_size (%s), or 0 for no bound", w.MinSize)
		}
		if w.MinAge < 0 {
			errs.add(key+".min_age", "must not be negative (0 turns it off)")
		}
		validateFolderPublish(&errs, key+".publish", w.Publish)
		c.validateFolderAfter(&errs, key+".after", w)
	}
	return errs
}

// validateFolderPublish checks a folder's publish section, named key.
func validateFolderPublish(errs *Errors, key string, p sidecar.Overrides) {
	if p.Title != nil {
		if msg := titleProblem(*p.Title); msg != "" {
			errs.add(key+".title", "%s", msg)
		}
	}
	if p.Format != nil && *p.Format != "sog" && *p.Format != "compressed.ply" {
		errs.add(key+".format", "must be sog or compressed.ply (got %q); it is the output format, not the uploaded file's", *p.Format)
	}
	if p.Encode != nil && !sidecar.ValidEncode(*p.Encode) {
		errs.add(key+".encode", "must be sog or off (got %q)", *p.Encode)
	}
	if err := sidecar.CheckSettings(p.Settings); err != nil {
		errs.add(key+".settings", "%v", err)
	}
}

// validateFolderAfter checks w's after section, named key, and makes its
// folders absolute.
func (c *Config) validateFolderAfter(errs *Errors, key string, w *Watch) {
	a := &w.After
	if a.OnSuccess != nil && *a.OnSuccess != "keep" && *a.OnSuccess != "delete" && *a.OnSuccess != "move" {
		errs.add(key+".on_success", "must be keep, delete or move (got %q)", *a.OnSuccess)
	}
	if a.OnFailure != nil && *a.OnFailure != "keep" && *a.OnFailure != "move" {
		errs.add(key+".on_failure", "must be keep or move (got %q)", *a.OnFailure)
	}
	eff := c.AfterFor(*w)
	if (a.OnSuccess != nil || a.SuccessDir != nil) && eff.OnSuccess == "move" && eff.SuccessDir == "" {
		errs.add(key+".success_dir", "is required when on_success is move")
	}
	if (a.OnFailure != nil || a.FailureDir != nil) && eff.OnFailure == "move" && eff.FailureDir == "" {
		errs.add(key+".failure_dir", "is required when on_failure is move")
	}
	for _, d := range []struct {
		name string
		dir  *string
	}{{"success_dir", a.SuccessDir}, {"failure_dir", a.FailureDir}} {
		if d.dir != nil && *d.dir != "" {
			c.absMoveDir(errs, key+"."+d.name, d.dir)
		}
	}
	if a.Exec != nil {
		*errs = append(*errs, execProblems(key+".exec", a.Exec)...)
	}
	if a.ExecTimeout != nil && *a.ExecTimeout <= 0 {
		errs.add(key+".exec_timeout", "must be positive")
	}
}

// absMoveDir makes a folder's move target absolute; it must be outside
// every watched folder, or a moved file would be found and moved again.
func (c *Config) absMoveDir(errs *Errors, key string, dir *string) {
	abs, err := filepath.Abs(*dir)
	if err != nil {
		errs.add(key, "%v", err)
		return
	}
	for j, o := range c.Watch {
		if _, in := trustfs.Within(o.Path, abs); in {
			errs.add(key, "%s is inside watch[%d].path %s; choose a folder outside every watched folder", abs, j, o.Path)
		}
	}
	*dir = abs
}

func execProblems(key string, argv []string) Errors {
	if len(argv) > 0 && strings.TrimSpace(argv[0]) == "" {
		return Errors{key + ": the first item is the program to run and must not be empty"}
	}
	if len(argv) == 1 && strings.ContainsAny(argv[0], " \t") && !filepath.IsAbs(argv[0]) {
		// "notify-chat --room x" as one string would look for a program of
		// that name: the list is not run by a shell.
		return Errors{key + ": a list of the program and its arguments, not a shell line (write [notify-chat, --room, x])"}
	}
	return nil
}

// validateNotify checks after.exec and the notify block.
func (c *Config) validateNotify() Errors {
	var errs Errors
	bad := func(key, format string, args ...any) {
		errs = append(errs, key+": "+fmt.Sprintf(format, args...))
	}
	errs = append(errs, execProblems("after.exec", c.After.Exec)...)
	if c.After.ExecTimeout <= 0 {
		bad("after.exec_timeout", "must be positive")
	}
	if c.Notify.Webhook != "" {
		if msg := webhookProblem(string(c.Notify.Webhook)); msg != "" {
			bad("notify.webhook", "%s", msg)
		}
	}
	if f := c.Notify.WebhookHeadersFile; f != "" {
		if c.Notify.Webhook == "" {
			bad("notify.webhook_headers_file", "is set but notify.webhook is not")
		} else if _, err := notify.ReadHeaders(f); err != nil {
			bad("notify.webhook_headers_file", "%v", err)
		}
	}
	return errs
}

// webhookProblem says what is wrong with a webhook URL, or "". Events name
// files and carry viewer links (capabilities for unlisted splats), so they
// travel over TLS unless they never leave the machine.
func webhookProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Host == "":
		return "has no host"
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return ""
		}
		return "http is allowed only on a loopback address (127.0.0.1, ::1, localhost); use https"
	default:
		return fmt.Sprintf("scheme must be https (got %q)", u.Scheme)
	}
}

// FollowsSymlinks says whether the watch root follows symbolic links that
// stay inside it (follow_symlinks); elsewhere a link fails its job.
func (c *Config) FollowsSymlinks(root string) bool {
	for _, w := range c.Watch {
		if w.Path == root {
			return w.FollowSymlinks
		}
	}
	return false
}

// SizeBounds returns the watch root's min_size and max_size (0: no bound),
// which the worker pool holds an unbundled SOG folder's bundle to (the
// watcher holds a file to them); a root no longer configured keeps the
// default bound.
func (c *Config) SizeBounds(root string) (minSize, maxSize int64) {
	for _, w := range c.Watch {
		if w.Path == root && w.MaxSize != nil {
			return int64(w.MinSize), int64(*w.MaxSize)
		}
	}
	return 0, int64(DefaultMaxSize)
}

// SizeBoundsOf returns the min_size and max_size `splatd publish` holds
// path to: those of the innermost watch entry holding it (WatchOf, whose
// settings it publishes with), else the default bound, the one a file the
// daemon found would have had.
func (c *Config) SizeBoundsOf(path string) (minSize, maxSize int64) {
	if w, ok := c.WatchOf(path); ok {
		return c.SizeBounds(w.Path)
	}
	return 0, int64(DefaultMaxSize)
}

// WatchOf returns the innermost watch entry holding path, for a one-shot
// publish to use that folder's settings as the daemon would.
func (c *Config) WatchOf(path string) (Watch, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Watch{}, false
	}
	var best Watch
	found := false
	for _, w := range c.Watch {
		if rel, err := filepath.Rel(w.Path, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			if !found || len(w.Path) > len(best.Path) {
				best, found = w, true
			}
		}
	}
	return best, found
}

// Roots turns the watch entries into the watcher's roots.
func (c *Config) Roots() []watcher.Root {
	roots := make([]watcher.Root, len(c.Watch))
	for i, w := range c.Watch {
		roots[i] = watcher.Root{
			Path: w.Path, Recursive: *w.Recursive, Include: w.Include, Exclude: w.Exclude,
			Mode: w.Mode, PollInterval: w.PollInterval.D(), FollowSymlinks: w.FollowSymlinks,
			MinSize: int64(w.MinSize), MaxSize: int64(*w.MaxSize), MinAge: w.MinAge.D(),
		}
	}
	return roots
}

// WatchPaths lists the watched folders, for the start line and reloads.
func (c *Config) WatchPaths() []string {
	paths := make([]string, len(c.Watch))
	for i, w := range c.Watch {
		paths[i] = w.Path
	}
	return paths
}

// TrustFS returns a trust boundary naming the watch folders, for a command
// that reads files under them without a watcher.
func (c *Config) TrustFS() *trustfs.FS {
	fsys := new(trustfs.FS)
	fsys.SetFolders(c.WatchPaths())
	return fsys
}

// IncompleteWait maps incomplete_timeout (0: wait for ever) to the
// pool's option (negative: never).
func (c *Config) IncompleteWait() time.Duration {
	if c.IncompleteTimeout == 0 {
		return -1
	}
	return c.IncompleteTimeout.D()
}

// ReceiptService is the protocol and service this daemon publishes to, as
// written into receipts and required of the receipts it adopts.
func (c *Config) ReceiptService() after.Service {
	return after.Service{Protocol: c.API.Protocol, API: c.API.BaseURL}
}

// ParamsFor answers one file's publish parameters: the global publish
// block, the innermost watch entry's own laid over it, then the folder's
// .splat.yaml files and the file's sidecar (sidecar.Resolve). A file outside
// every watch folder gets the global block and its own sidecar. The daemon,
// the dry run and `splatd publish` all ask it.
func (c *Config) ParamsFor(fsys *trustfs.FS, path string, mod time.Time) (state.PublishParams, error) {
	defaults, root := c.Publish.Params(), ""
	if w, ok := c.WatchOf(path); ok {
		defaults, root = c.PublishFor(w), w.Path
	}
	return sidecar.Resolve(fsys, defaults, path, root, mod)
}

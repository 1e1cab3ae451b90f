package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

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

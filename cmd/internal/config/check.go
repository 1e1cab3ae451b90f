package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// checkEnvironment looks at what `config check` can see beyond the keys:
// the watch folders and the state directory on this machine. warnings are
// conditions the daemon lives with (it waits for a missing folder, and
// says so) but that are usually mistakes; fatal are those it would die on
// at start (a state directory it cannot create or write). `config check`
// prints both and exits 1 only for fatal ones, so that a check on a
// machine where the folders come later (a mount, a first capture) passes.
func (c *Config) CheckEnvironment() (warnings, fatal []string) {
	for i, w := range c.Watch {
		key := fmt.Sprintf("watch[%d].path", i)
		if w.given != "" && !filepath.IsAbs(w.given) {
			warnings = append(warnings, fmt.Sprintf("%s: %q is relative: it is taken from the folder splatd is started in (here %s); write the absolute path", key, w.given, w.Path))
		}
		fi, err := os.Stat(w.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			warnings = append(warnings, fmt.Sprintf("%s: %s does not exist: splatd waits for it and /readyz stays not ready until it does", key, w.Path))
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("%s: %v", key, err))
		case !fi.IsDir():
			warnings = append(warnings, fmt.Sprintf("%s: %s is not a folder: give the folder that holds the files", key, w.Path))
		}
		for j, o := range c.Watch {
			if j <= i {
				continue
			}
			if inside(w.Path, o.Path) || inside(o.Path, w.Path) {
				warnings = append(warnings, fmt.Sprintf("%s and watch[%d].path overlap (%s, %s): the inner folder's settings apply to its files; list each folder once", key, j, w.Path, o.Path))
			}
		}
	}
	if err := writableDir(c.StateDir); err != nil {
		fatal = append(fatal, fmt.Sprintf("state_dir: %v: splatd cannot start (run as the daemon's user, or create the folder writable for it)", err))
	}
	return warnings, fatal
}

// inside reports whether p is dir or below it.
func inside(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// writableDir checks that dir exists and a file can be created in it, or
// that it can be created: the first existing parent takes a file.
func writableDir(dir string) error {
	probe := dir
	for {
		fi, err := os.Stat(probe)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a folder", probe)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			return err
		}
		probe = parent
	}
	f, err := os.CreateTemp(probe, ".splatd-check-*")
	if err != nil {
		if probe != dir {
			return fmt.Errorf("%s does not exist and cannot be created: %w", dir, err)
		}
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// ProbeStorage makes one HEAD request to the storage host of a signed URL
// (without its query, so nothing is authorised): any HTTP answer means the
// host resolves, accepts connections and has a certificate that verifies.
func ProbeStorage(ctx context.Context, cfg *Config, signed string) (string, error) {
	u, err := url.Parse(signed)
	if err != nil {
		return "", err
	}
	origin := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}
	roots, err := cfg.RootCAs()
	if err != nil {
		return u.Host, err
	}
	hc := &http.Client{Timeout: min(cfg.API.Timeout.D(), 30*time.Second), Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, origin.String(), nil)
	if err != nil {
		return u.Host, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return u.Host, err
	}
	resp.Body.Close()
	return u.Host, nil
}

// ProbeHint names the configuration class of a probe's error, as the
// daemon would report it.
func ProbeHint(err error) string {
	if kind := state.ConfigKind(err); kind != "" {
		return fmt.Sprintf(" [configuration error (%s): %s]", kind, AdviceText(kind))
	}
	return ""
}

func AdviceText(kind string) string {
	switch kind {
	case state.ConfigTLS:
		return "the certificate does not verify; set api.ca_file to the CA that signed it"
	case state.ConfigDNS:
		return "the host name does not resolve"
	case state.ConfigRefused:
		return "the host refuses connections"
	}
	return ""
}

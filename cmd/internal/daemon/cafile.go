package daemon

import (
	"bytes"
	"context"
	"os"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
)

// caFileCheck is how often the daemon reads api.ca_file for a change.
const caFileCheck = 5 * time.Second

// caState is api.ca_file as the client last took it.
type caState struct {
	path string
	pem  []byte // nil: unread or unreadable
}

// watchCAFile reads api.ca_file every caFileCheck and gives the client its
// new roots when its content changed (a renewed or corrected CA), so that
// no restart is needed; a reload applies a new api.ca_file the same way.
func (d *Daemon) watchCAFile(ctx context.Context) error {
	t := time.NewTicker(caFileCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.reloadMu.Lock()
			_, _ = d.applyCA(d.config())
			d.reloadMu.Unlock()
		}
	}
}

// applyCA gives the client cfg's api.ca_file roots when the file (or its
// path) changed since the client last took it; it reports whether it did.
// An unreadable or empty file keeps the roots in force, logged once per
// content. The caller holds reloadMu.
func (d *Daemon) applyCA(cfg *config.Config) (bool, error) {
	path := cfg.API.CAFile
	var pem []byte
	if path != "" {
		var err error
		if pem, err = os.ReadFile(path); err != nil {
			if d.ca.path == path && d.ca.pem == nil {
				return false, nil // logged already
			}
			d.ca = caState{path: path}
			d.log.Error().Err(err).Str("ca_file", path).Msg("api.ca_file cannot be read: the roots in force stay")
			return false, err
		}
	}
	if d.ca.path == path && bytes.Equal(d.ca.pem, pem) {
		return false, nil
	}
	roots, err := cfg.RootCAs()
	d.ca = caState{path: path, pem: pem}
	if err != nil {
		d.log.Error().Err(err).Msg("api.ca_file holds no usable certificate: the roots in force stay")
		return false, err
	}
	d.client.SetRootCAs(roots)
	d.log.Info().Str("ca_file", path).Msg("api.ca_file read: the API and storage hosts are verified against it from now on")
	d.pool.ConfigChanged()
	return true, nil
}

// readCA is api.ca_file's content as the client was built with it.
func readCA(cfg *config.Config) caState {
	st := caState{path: cfg.API.CAFile}
	if st.path != "" {
		st.pem, _ = os.ReadFile(st.path)
	}
	return st
}

// reloadTrust applies, at a reload, a changed api.ca_file (its path or its
// content) and a changed token source: the waiting work is tried at once.
func (d *Daemon) reloadTrust(res *ReloadResult, eff, nw *config.Config) {
	if _, err := d.applyCA(nw); err != nil {
		if res.changed("api.ca_file") {
			res.notApplied("api.ca_file", err)
		}
	} else {
		eff.API.CAFile = nw.API.CAFile
	}
	tokens := d.client.Token()
	changed, err := tokens.Reload()
	if err != nil {
		res.Errors = append(res.Errors, "token: "+err.Error())
	}
	if changed {
		d.log.Info().Str("token_from", tokens.Origin()).Msg("token changed: trying the waiting work with it now")
		d.pool.ConfigChanged()
	}
}

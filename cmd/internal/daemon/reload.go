package daemon

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
)

// ReloadResult is the outcome of a reload, logged and returned to `splatd
// reload`.
type ReloadResult struct {
	Config  string   `json:"config"`            // the file read
	Errors  []string `json:"errors,omitempty"`  // the new config's problems: nothing applied
	Applied []string `json:"applied,omitempty"` // keys changed and in force
	Restart []string `json:"restart,omitempty"` // keys changed that need a restart: old values kept
	TookS   float64  `json:"took_s"`
}

// config returns the config in force: as started, with what reloads
// applied. (d.cfg stays the config the daemon started with.)
func (d *Daemon) config() *config.Config { return d.live.Load() }

// reloadOnHUP reloads the config on every SIGHUP until ctx ends.
func (d *Daemon) reloadOnHUP(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.o.HUP:
			d.reload()
		}
	}
}

// reload reads d.o.ConfigPath again and applies what it can; see config.Reloadable.
func (d *Daemon) reload() ReloadResult {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	start := time.Now()
	res := ReloadResult{Config: d.o.ConfigPath}
	nw, err := config.Load(d.o.ConfigPath, true)
	if err != nil {
		res.Errors = config.ErrorLines(err)
		res.TookS = math.Round(time.Since(start).Seconds()*1000) / 1000
		d.log.Error().Str("config", d.o.ConfigPath).Strs("errors", res.Errors).
			Msg("config reload refused: the new config is invalid; the running one stays")
		return res
	}
	old := d.config()
	res.sortChanges(config.ChangedKeys(old, nw))
	eff := d.applyReload(&res, old, nw)
	d.live.Store(eff)
	res.TookS = math.Round(time.Since(start).Seconds()*1000) / 1000
	d.logReload(res, eff)
	return res
}

// sortChanges files each changed key under Applied or Restart.
func (r *ReloadResult) sortChanges(keys []string) {
	for _, key := range keys {
		if !config.Reloadable(key) {
			r.Restart = append(r.Restart, key)
			continue
		}
		r.Applied = append(r.Applied, key)
	}
}

// changed reports whether Applied holds prefix or a key under it.
func (r *ReloadResult) changed(prefix string) bool {
	for _, k := range r.Applied {
		if k == prefix || strings.HasPrefix(k, prefix+".") {
			return true
		}
	}
	return false
}

// notApplied takes the keys under prefix back out of Applied: a component
// refused them (validation should have caught it first).
func (r *ReloadResult) notApplied(prefix string, err error) {
	r.Errors = append(r.Errors, prefix+": "+err.Error())
	kept := r.Applied[:0]
	for _, k := range r.Applied {
		if k != prefix && !strings.HasPrefix(k, prefix+".") {
			kept = append(kept, k)
		}
	}
	r.Applied = kept
}

// applyReload hands the components the changed keys of res.Applied, from
// nw, and returns old with those that took effect. A watch change that the
// watcher refused is out of Applied before publish and after look at it.
func (d *Daemon) applyReload(res *ReloadResult, old, nw *config.Config) *config.Config {
	eff := *old
	if res.changed("watch") {
		// The pool reads follow_symlinks from the config in force: it has the
		// new roots before the watcher hands it a file of theirs.
		pre := eff
		pre.Watch = nw.Watch
		d.live.Store(&pre)
		if err := d.watch.SetRoots(nw.Roots()); err != nil {
			res.notApplied("watch", err)
			d.live.Store(old)
		} else {
			eff.Watch = nw.Watch
		}
	}
	if res.changed("publish") || res.changed("watch") { // watch entries carry their own publish blocks
		if err := d.pool.SetPublish(d.poolFiles(nw), nw.Publish.OnUncertain); err != nil {
			res.notApplied("publish", err)
		} else {
			eff.Publish = nw.Publish
		}
	}
	if res.changed("after") || res.changed("watch") { // and their own after blocks
		d.actions.Store(d.afterRunners(nw))
		eff.After = nw.After
	}
	d.reloadNotify(res, &eff, nw)
	d.reloadTrust(res, &eff, nw)
	if res.changed("log.level") && d.o.LogLevel != nil {
		level, _ := zerolog.ParseLevel(nw.Log.Level) // validated
		d.o.LogLevel.SetLevel(level)
		eff.Log.Level = nw.Log.Level
	}
	if res.changed("upload.bandwidth") {
		d.client.Limiter().SetSchedule(nw.Bandwidth())
		eff.Upload.Bandwidth = nw.Upload.Bandwidth
	}
	return &eff
}

// reloadNotify points the notifier at nw's webhook and commands. It runs
// on every reload, so that an edited notify.webhook_headers_file (a rotated
// secret) applies too. A webhook the notifier cannot take (an unreadable
// headers file, a URL or header holding the API token) keeps the old
// webhook and headers and names the problem; the new commands apply still.
func (d *Daemon) reloadNotify(res *ReloadResult, eff, nw *config.Config) {
	if d.events == nil {
		return
	}
	nt, err := nw.NotifyTarget(d.client.Token().Value())
	t := d.events.Target()
	t.Exec = nt.Exec
	if err == nil {
		t.Webhook, t.Headers = nt.Webhook, nt.Headers
		err = d.events.SetTarget(t)
	}
	if err == nil {
		eff.Notify = nw.Notify
		return
	}
	if res.changed("notify") {
		res.notApplied("notify", err)
	} else {
		res.Errors = append(res.Errors, err.Error())
	}
	t = d.events.Target()
	t.Exec = nt.Exec
	_ = d.events.SetTarget(t) // its webhook was taken before
}

// logReload logs a reload's outcome and the config now in force.
func (d *Daemon) logReload(res ReloadResult, eff *config.Config) {
	ev := d.log.Info()
	if len(res.Errors) > 0 {
		ev = d.log.Error().Strs("errors", res.Errors)
	}
	ev.Str("config", d.o.ConfigPath).Strs("applied", res.Applied).Strs("watch", eff.WatchPaths()).
		Str("bandwidth", d.client.Limiter().Schedule().String()).Str("log_level", eff.Log.Level).
		Float64("took_s", res.TookS).Msg("config reloaded")
	if len(res.Restart) > 0 {
		d.log.Warn().Strs("keys", res.Restart).
			Msg("config keys changed that need a restart (systemctl restart splatd); their old values stay until then")
	}
	for _, n := range eff.ProtocolNotes() {
		d.log.Warn().Msg(n)
	}
}

// adminReload is the admin socket's POST /v1/reload.
func (d *Daemon) adminReload(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.reload())
}

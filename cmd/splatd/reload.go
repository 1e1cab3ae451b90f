package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
)

// reloadResult is the outcome of a reload, logged and returned to `splatd
// reload`.
type reloadResult struct {
	Config  string   `json:"config"`            // the file read
	Errors  []string `json:"errors,omitempty"`  // the new config's problems: nothing applied
	Applied []string `json:"applied,omitempty"` // keys changed and in force
	Restart []string `json:"restart,omitempty"` // keys changed that need a restart: old values kept
	TookS   float64  `json:"took_s"`
}

// config returns the config in force: as started, with what reloads
// applied. (d.cfg stays the config the daemon started with.)
func (d *daemon) config() *config.Config { return d.live.Load() }

// reloadOnHUP reloads the config on every SIGHUP until ctx ends.
func (d *daemon) reloadOnHUP(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.hup:
			d.reload()
		}
	}
}

// reload reads d.cfgPath again and applies what it can; see config.Reloadable.
func (d *daemon) reload() reloadResult {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	start := time.Now()
	res := reloadResult{Config: d.cfgPath}
	nw, err := config.Load(d.cfgPath, true)
	if err != nil {
		res.Errors = config.ErrorLines(err)
		res.TookS = math.Round(time.Since(start).Seconds()*1000) / 1000
		d.log.Error().Str("config", d.cfgPath).Strs("errors", res.Errors).
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
func (r *reloadResult) sortChanges(keys []string) {
	for _, key := range keys {
		if !config.Reloadable(key) {
			r.Restart = append(r.Restart, key)
			continue
		}
		r.Applied = append(r.Applied, key)
	}
}

// changed reports whether Applied holds prefix or a key under it.
func (r *reloadResult) changed(prefix string) bool {
	for _, k := range r.Applied {
		if k == prefix || strings.HasPrefix(k, prefix+".") {
			return true
		}
	}
	return false
}

// notApplied takes the keys under prefix back out of Applied: a component
// refused them (validation should have caught it first).
func (r *reloadResult) notApplied(prefix string, err error) {
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
func (d *daemon) applyReload(res *reloadResult, old, nw *config.Config) *config.Config {
	eff := *old
	if res.changed("watch") {
		if err := d.watch.SetRoots(nw.Roots()); err != nil {
			res.notApplied("watch", err)
		} else {
			eff.Watch = nw.Watch
		}
	}
	if res.changed("publish") || res.changed("watch") { // watch entries carry their own publish blocks
		if err := d.pool.SetPublish(nw.Publish.Params(), nw.PublishDefaults(), nw.Publish.OnUncertain); err != nil {
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
	if res.changed("log.level") && d.logOut != nil {
		level, _ := zerolog.ParseLevel(nw.Log.Level) // validated
		d.logOut.SetLevel(level)
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
func (d *daemon) reloadNotify(res *reloadResult, eff, nw *config.Config) {
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
func (d *daemon) logReload(res reloadResult, eff *config.Config) {
	ev := d.log.Info()
	if len(res.Errors) > 0 {
		ev = d.log.Error().Strs("errors", res.Errors)
	}
	ev.Str("config", d.cfgPath).Strs("applied", res.Applied).Strs("watch", eff.WatchPaths()).
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
	body, live, err := adminCall(ctx, cfg.StateDir, http.MethodPost, "/v1/reload")
	if err == nil && !live {
		err = fmt.Errorf("no splatd is running on %s (state_dir)", cfg.StateDir)
	}
	var res reloadResult
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
func printReload(c *cli, res reloadResult) int {
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

// adminReload is the admin socket's POST /v1/reload.
func (d *daemon) adminReload(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.reload())
}

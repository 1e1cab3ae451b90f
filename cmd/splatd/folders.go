package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/notify"
)

// eventsGrace is how long queued notifications may still go out once the
// daemon has stopped its workers.
const eventsGrace = 10 * time.Second

// publishDefaults returns the pool's per-root publish defaults: each watch
// entry's own publish block over the global one, looked up by the root a
// job came from (state.Job.Root, the entry's path).
func publishDefaults(cfg *Config) func(root string) state.PublishParams {
	byRoot := make(map[string]state.PublishParams, len(cfg.Watch))
	for _, w := range cfg.Watch {
		byRoot[w.Path] = cfg.publishFor(w)
	}
	global := cfg.Publish.Params()
	return func(root string) state.PublishParams {
		if p, ok := byRoot[root]; ok {
			return p
		}
		return global // a job from a watch entry since removed from the config
	}
}

// followSymlinks says which watch roots follow symbolic links that stay
// inside them (follow_symlinks); elsewhere a link fails its job.
func followSymlinks(cfg *Config) func(root string) bool {
	follow := make(map[string]bool, len(cfg.Watch))
	for _, w := range cfg.Watch {
		follow[w.Path] = w.FollowSymlinks
	}
	return func(root string) bool { return follow[root] }
}

// afterRunners builds the after-actions of every watch entry (its own after
// block over the global one) and the global ones for other jobs.
func (d *daemon) afterRunners(cfg *Config) *after.Runners {
	runner := func(a AfterConfig) *after.Runner {
		return after.New(after.Options{
			OnSuccess:  a.OnSuccess,
			SuccessDir: a.SuccessDir,
			OnFailure:  a.OnFailure,
			FailureDir: a.FailureDir,
			Receipt:    a.Receipt,
			Protocol:   receiptService(cfg).Protocol,
			API:        receiptService(cfg).API,
			Lookup:     d.store.Get,
			Logger:     d.log,
		})
	}
	rs := &after.Runners{Default: runner(cfg.After), Roots: make(map[string]*after.Runner, len(cfg.Watch))}
	for _, w := range cfg.Watch {
		rs.Roots[w.Path] = runner(cfg.afterFor(w))
	}
	return rs
}

// newEvents builds the notifier of notify.webhook and after.exec. token is
// the API token in use: a webhook URL or header that holds it is refused,
// since the receiver would then hold the account.
func (d *daemon) newEvents(token string) (*notify.Notifier, error) {
	t, err := notifyTarget(d.cfg, token)
	if err != nil {
		return nil, err
	}
	return notify.New(notify.Options{
		Webhook:  t.Webhook,
		Headers:  t.Headers,
		Exec:     t.Exec,
		Observer: d.m,
		Logger:   d.log,
	})
}

// notifyTarget is where cfg sends events: notify.webhook with the headers
// of notify.webhook_headers_file (read now), and each watch entry's
// after.exec.
func notifyTarget(cfg *Config, token string) (notify.Target, error) {
	webhook, headers, err := notifyWebhook(cfg, token)
	return notify.Target{Webhook: webhook, Headers: headers, Exec: notifyExec(cfg)}, err
}

// notifyWebhook is cfg's webhook and its headers (the file read now).
func notifyWebhook(cfg *Config, token string) (string, http.Header, error) {
	var headers http.Header
	if f := cfg.Notify.WebhookHeadersFile; f != "" {
		var err error
		if headers, err = notify.ReadHeaders(f); err != nil {
			return "", nil, errors.New("notify.webhook_headers_file: " + err.Error())
		}
	}
	if err := checkNotifySecrets(string(cfg.Notify.Webhook), headers, token); err != nil {
		return "", nil, err
	}
	return string(cfg.Notify.Webhook), headers, nil
}

// notifyExec returns the after.exec command of a job's watch root: the
// entry's own after block over the global one.
func notifyExec(cfg *Config) func(root string) notify.Command {
	command := func(a AfterConfig) notify.Command {
		return notify.Command{Argv: a.Exec, Timeout: a.ExecTimeout.D()}
	}
	byRoot := make(map[string]notify.Command, len(cfg.Watch))
	for _, w := range cfg.Watch {
		byRoot[w.Path] = command(cfg.afterFor(w))
	}
	global := command(cfg.After)
	return func(root string) notify.Command {
		if c, ok := byRoot[root]; ok {
			return c
		}
		return global
	}
}

// checkNotifySecrets refuses a webhook URL or header carrying the API token.
func checkNotifySecrets(webhook string, headers http.Header, token string) error {
	if token == "" {
		return nil
	}
	if strings.Contains(webhook, token) {
		return errors.New("notify.webhook: the URL holds the API token; give the webhook a secret of its own")
	}
	for name, vs := range headers {
		for _, v := range vs {
			if strings.Contains(v, token) {
				return errors.New("notify.webhook_headers_file: header " + name + " holds the API token; give the webhook a secret of its own")
			}
		}
	}
	return nil
}

// finishAndNotify is the pool's Finish hook: the after-actions of the job's
// root, then its notifications (queued, never waited for). A Finish that
// fails runs again at the next start, so its events go out once it has
// succeeded; a crash between the two can repeat them (at least once: the
// event's job id tells them apart).
func finishAndNotify(current func() *after.Runners, events *notify.Notifier) func(ctx context.Context, j state.Job) error {
	return func(ctx context.Context, j state.Job) error {
		actions := current() // a reload may replace them
		file, err := actions.Finish(ctx, j)
		if err != nil {
			return err
		}
		rec := actions.For(j.Root).Receipt(j)
		if file != "" {
			rec.File = file
		}
		events.Finished(j.Root, rec)
		return nil
	}
}

// stopEvents lets queued notifications go out for eventsGrace, then drops
// the rest (logged by the notifier).
func (d *daemon) stopEvents() {
	if d.events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventsGrace)
	defer cancel()
	_ = d.events.Shutdown(ctx)
}

// watchOf returns the innermost watch entry holding path, for a one-shot
// publish to use that folder's settings as the daemon would.
func (c *Config) watchOf(path string) (WatchConfig, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return WatchConfig{}, false
	}
	var best WatchConfig
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

package daemon

import (
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/notify"
)

// eventsGrace is how long queued notifications may still go out once the
// daemon has stopped its workers.
const eventsGrace = 10 * time.Second

// afterRunners builds the after-actions of every watch entry (its own after
// block over the global one) and the global ones for other jobs.
func (d *Daemon) afterRunners(cfg *config.Config) *after.Runners {
	runner := func(a config.After) *after.Runner {
		return after.New(after.Options{
			OnSuccess:  a.OnSuccess,
			SuccessDir: a.SuccessDir,
			OnFailure:  a.OnFailure,
			FailureDir: a.FailureDir,
			Receipt:    a.Receipt,
			Protocol:   cfg.ReceiptService().Protocol,
			API:        cfg.ReceiptService().API,
			Lookup:     d.store.Get,
			Logger:     d.log,
			FS:         d.fs,
		})
	}
	rs := &after.Runners{Default: runner(cfg.After), Roots: make(map[string]*after.Runner, len(cfg.Watch))}
	for _, w := range cfg.Watch {
		rs.Roots[w.Path] = runner(cfg.AfterFor(w))
	}
	return rs
}

// newEvents builds the notifier of notify.webhook and after.exec. token is
// the API token in use: a webhook URL or header that holds it is refused,
// since the receiver would then hold the account.
func (d *Daemon) newEvents(token string) (*notify.Notifier, error) {
	t, err := d.cfg.NotifyTarget(token)
	if err != nil {
		return nil, err
	}
	return notify.New(notify.Options{
		Webhook:  t.Webhook,
		Headers:  t.Headers,
		Exec:     t.Exec,
		Grace:    eventsGrace,
		Observer: d.m,
		Logger:   d.log,
	})
}

package daemon

import (
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/notify"
	"github.com/splatd/splatd/uploader/pace"
)

// The packages meet here. Each consumer declares the small interface it
// needs (docs/conventions.md: interfaces live with their consumer); these assertions
// keep the providers honest at compile time.
var (
	_ uploader.Store  = (*queue.Store)(nil)
	_ api.Observer    = (*metrics.Metrics)(nil)
	_ notify.Observer = (*metrics.Metrics)(nil)

	// The store's optional hook (uploader/afterstage.go), found by type
	// assertion so that test fakes need not implement it.
	_ interface {
		RecordAfterError(id uint64, action, msg string, retry time.Time) (state.Job, error)
	} = (*queue.Store)(nil)
)

// NewClient builds the API client for cfg with token; a nil pacer is the
// client's own (one-shot commands keep no pacer state). Its storage PUTs
// share one bandwidth limiter built from upload.bandwidth: one per daemon
// (the daemon has one client) and per `splatd publish`.
func NewClient(cfg *config.Config, version string, token *api.Token, pacer *pace.Pacer, obs api.Observer, log zerolog.Logger) (*api.Client, error) {
	roots, err := cfg.RootCAs()
	if err != nil {
		return nil, err
	}
	if pacer == nil { // a one-shot's: in memory, with the daemon's cap
		o := pace.Options{MaxWait: cfg.API.MaxServerWait.D(), Logger: log}
		if obs != nil {
			o.Waited = obs.RateLimitWait
		}
		pacer = pace.New(o)
	}
	return api.NewClient(api.ClientOptions{
		BaseURL:     cfg.API.BaseURL,
		TokenSource: token,
		Pacer:       pacer,
		RootCAs:     roots,
		Timeout:     cfg.API.Timeout.D(),
		UserAgent:   "splatd/" + version,
		Observer:    obs,
		Logger:      log,
		Limiter:     api.NewLimiter(cfg.Bandwidth(), api.LimiterOptions{}),
	})
}

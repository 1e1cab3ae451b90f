package daemon

import (
	"time"

	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/notify"
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

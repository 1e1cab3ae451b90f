package main

import (
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/notify"
)

// The packages meet here. Each consumer declares the small interface it
// needs (STYLE.md: interfaces live with their consumer); these assertions
// keep the providers honest at compile time.
var (
	_ uploader.Store    = (*queue.Store)(nil)
	_ uploader.Observer = (*metrics.Metrics)(nil)
	_ api.Observer      = (*metrics.Metrics)(nil)
	_ notify.Observer   = (*metrics.Metrics)(nil)
)

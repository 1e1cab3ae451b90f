package queue_test

import (
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader"
)

// The worker pool declares the store it needs; the queue must provide it.
var _ uploader.Store = (*queue.Store)(nil)

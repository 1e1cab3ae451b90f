package uploader

import (
	"context"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// finishFunc is a Finisher of a func.
type finishFunc func(ctx context.Context, j state.Job) error

func (f finishFunc) Finish(ctx context.Context, j state.Job) error { return f(ctx, j) }

// receiptFunc is Peers of a receipt func, with no fleet.
type receiptFunc func(j state.Job) (PeerOutcome, error)

func (f receiptFunc) Receipt(j state.Job) (PeerOutcome, error) { return f(j) }
func (receiptFunc) Fleet() Fleet                               { return nil }

// fleetPeers is Peers of a fleet and a receipt func.
type fleetPeers struct {
	receiptFunc
	fleet Fleet
}

func (f fleetPeers) Fleet() Fleet { return f.fleet }

// paramsFunc is Files of a Params func: no links followed, no size bounds.
type paramsFunc func(path, root string, mod time.Time) (state.PublishParams, error)

func (f paramsFunc) Params(path, root string, mod time.Time) (state.PublishParams, error) {
	return f(path, root, mod)
}
func (paramsFunc) FS() *trustfs.FS                  { return nil }
func (paramsFunc) FollowSymlinks(string) bool       { return false }
func (paramsFunc) SizeBounds(string) (int64, int64) { return 0, 0 }

// boundsFiles is SidecarFiles with each root's size bounds.
type boundsFiles struct {
	SidecarFiles
	bounds func(root string) (minSize, maxSize int64)
}

func (b boundsFiles) SizeBounds(root string) (int64, int64) { return b.bounds(root) }

// onRecovered is an Observer that tells f each StoreRecovered.
type onRecovered struct {
	NopObserver
	f func()
}

func (o onRecovered) StoreRecovered() { o.f() }

// editPublish edits the publish parameters of o's SidecarFiles.
func editPublish(o *PoolOptions, edit func(*state.PublishParams)) {
	sf, _ := o.Files.(SidecarFiles)
	edit(&sf.Publish)
	o.Files = sf
}

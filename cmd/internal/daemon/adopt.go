package daemon

import (
	"context"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
)

// AdoptReport is what `splatd adopt` did (or would do, with -dry-run).
type AdoptReport = after.AdoptReport

// AdoptDir adopts the receipts under dir into st (after.AdoptDir) for the
// daemon cfg configures: its service, its watch folders as the roots, its
// viewer hosts as the links a receipt may carry.
func AdoptDir(ctx context.Context, st *queue.Store, cfg *config.Config, dir string, dryRun bool) (AdoptReport, error) {
	return after.AdoptDir(ctx, st, dir, after.AdoptOptions{
		Service: cfg.ReceiptService(), Roots: cfg.WatchPaths(), ViewerURL: cfg.TrustedViewerURL, DryRun: dryRun,
		FS: cfg.TrustFS(),
	})
}

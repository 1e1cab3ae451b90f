package after

import (
	"context"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Runners picks the after-actions of a job's watch root: a watch entry
// with its own after block has its own Runner, keyed by the root's path
// (state.Job.Root); every other job uses Default.
type Runners struct {
	Default *Runner
	Roots   map[string]*Runner
}

// For returns the Runner of a watch root.
func (r Runners) For(root string) *Runner {
	if a, ok := r.Roots[root]; ok {
		return a
	}
	return r.Default
}

// Finish runs the after-actions of j's root (see Runner.Finish).
func (r Runners) Finish(ctx context.Context, j state.Job) (Receipt, error) {
	return r.For(j.Root).Finish(ctx, j)
}

// fs is the trust boundary of the runners (all share one).
func (r Runners) fs() *trustfs.FS {
	if r.Default == nil {
		return nil
	}
	return r.Default.o.FS
}

// Receipt returns the receipt Finish would write for a final job, with File
// where the job's file was found.
func (a *Runner) Receipt(j state.Job) Receipt { return a.receipt(j) }

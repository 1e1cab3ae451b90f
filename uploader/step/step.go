// Package step is what a protocol's steps share with the pool that runs
// them: the pool's services they call (Pool), the values they read (Env),
// the content they upload (File) and the moves both protocols make.
package step

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// Pool is what a protocol's steps call on the pool that runs them.
type Pool interface {
	// CheckName stats j's path through its watch folder and requires a
	// regular file.
	CheckName(j state.Job) (fs.FileInfo, error)
	// UploadFile returns j's content for its upload; changed is the file's
	// new stat when it is no longer the one hashed (then f is nil).
	UploadFile(j state.Job) (f *File, changed fs.FileInfo, err error)
	// Changed returns j back in queued with fi's size and mtime, to be
	// hashed again once it has settled.
	Changed(j state.Job, fi fs.FileInfo, why string) (state.Job, error)
	// Commit stores j moved on from stage from within a step (a v1 create
	// intent, a part's ETag), retrying a failing store.
	Commit(ctx context.Context, j state.Job, from state.Stage) (state.Job, error)
	// Hook is the tests' crash point: a non-nil error is a simulated death.
	Hook(point string, j state.Job) error
	// UntilDrain returns a context that also ends, with cause ErrDrained,
	// when the pool starts draining.
	UntilDrain(ctx context.Context) (context.Context, context.CancelFunc)
	// Report records the bytes sent of job j's upload; EndReport ends it.
	Report(j state.Job, sent, size int64)
	EndReport(id uint64)
}

// Env is what a protocol's steps are given: the pool, the API client, the
// one retry rule and the pool's clock, logger and timing.
type Env struct {
	Pool   Pool
	Client *api.Client
	Log    zerolog.Logger
	Now    func() time.Time
	Policy state.Policy
	Timing Timing
}

// Timing is the part of the pool's Timing that the steps read.
type Timing struct {
	URLMaxAge       time.Duration // a stored signed URL older than this is signed again
	PeerWait        time.Duration // patience for a fleet peer's progress or receipt
	PollInterval    time.Duration // the first pause between polls
	PollMaxInterval time.Duration // the cap of the pause between polls
	PollTimeout     time.Duration // since publish; then the job fails
}

// ErrDrained ends a worker, or a step that had not started its side effect
// (a publish still waiting for its rate-limit slot), once the pool drains.
// Nothing is committed: the job stays where it was.
var ErrDrained = errors.New("worker: draining for shutdown")

// ErrContentChanged: the bytes read for the upload do not hash to the
// recorded sha256.
var ErrContentChanged = errors.New("content changed since it was hashed")

// FileError is a problem with the file that retrying cannot fix (gone, not
// a regular file): it fails the job like an invalid file.
type FileError struct{ Err error }

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }
func (e *FileError) Invalid() bool { return true }

// Drained is err, or ErrDrained when dctx, a context of UntilDrain, ended
// because the pool drains while ctx runs on.
func Drained(ctx, dctx context.Context, err error) error {
	if errors.Is(context.Cause(dctx), ErrDrained) && ctx.Err() == nil {
		return ErrDrained
	}
	return err
}

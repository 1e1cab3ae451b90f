// Package content is a job's content as the pool reads it: the queued
// check (queued → ready: stat, content check, hash, encoding, a SOG
// folder's bundle), the one descriptor kept from the hash to the upload,
// and the files the pool makes of it (encodings, bundles) under its work
// directory (docs/architecture.md, "One open, one hash").
package content

import (
	"context"
	"io"
	"io/fs"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// What a job's check does while its Meter shows it.
const (
	Hashing  = "hashing"  // the sha256 of the job's file
	Bundling = "bundling" // a SOG folder's bundle, hashed as it is written
	Encoding = "encoding" // publish.encode: the PLY read by the encoder
)

// Files is what the live configuration says of a watch folder's files.
type Files interface {
	// Params is the publish parameters of the file at path under root,
	// last changed at mod.
	Params(path, root string, mod time.Time) (state.PublishParams, error)
	// FollowSymlinks says whether root's files may be links that stay
	// inside it.
	FollowSymlinks(root string) bool
	// SizeBounds is root's min_size and max_size (0: no bound).
	SizeBounds(root string) (minSize, maxSize int64)
}

// Fleet is the fleet's say in a job's check (fleet.View).
type Fleet interface {
	// Starting parks j when its file is another daemon's share.
	Starting(j state.Job) (next state.Job, parked bool)
	// Hashed parks j on a twin of sum another daemon has in flight.
	Hashed(j state.Job, sum string) (next state.Job, parked bool, err error)
	// Gone ends j when its file is gone because a peer published it.
	Gone(j state.Job, openErr error) (next state.Job, ok bool, err error)
}

// Meter shows the long part of a job's check until Stop: Write counts
// the bytes of a pass, Encoded the encoder's progress over its passes.
type Meter interface {
	io.Writer
	Encoded(done, total int64)
	Stop()
}

// Env is what a Source is given by its pool.
type Env struct {
	FS    *trustfs.FS      // the watch folders' trust boundary
	Files func() Files     // the publish settings now (a reload replaces them)
	Fleet Fleet            // parks or ends a job by its peers
	Now   func() time.Time // the clock
	Log   zerolog.Logger
	// Settle is how long a changed file must stay unchanged before it is
	// checked again.
	Settle time.Duration
	// UntilDrain returns a context that also ends (step.ErrDrained) when
	// the pool starts draining.
	UntilDrain func(ctx context.Context) (context.Context, context.CancelFunc)
	// Meter shows job j's check doing step over size bytes.
	Meter func(j state.Job, step string, size int64) Meter
	// EncodeDir holds publish.encode's encodings ("": encodings are
	// refused); BundleDir holds SOG folders' bundles.
	EncodeDir, BundleDir string
	// MemoryLimit is the process's memory limit (math.MaxInt64: none);
	// nil: GOMEMLIMIT's.
	MemoryLimit func() int64
}

// Source checks, opens and encodes the pool's jobs' content.
type Source struct {
	env        Env
	open       openFiles     // each job's descriptor from its hash to its upload
	encodeSlot chan struct{} // one publish.encode at a time
}

// New returns the Source of env.
func New(env Env) *Source {
	if env.MemoryLimit == nil {
		env.MemoryLimit = func() int64 { return debug.SetMemoryLimit(-1) }
	}
	return &Source{env: env, encodeSlot: make(chan struct{}, 1)}
}

// Drop closes job id's kept descriptor, if any (a job no longer to upload).
func (s *Source) Drop(id uint64) { s.open.drop(id) }

// Close closes every kept descriptor (the pool stops).
func (s *Source) Close() { s.open.closeAll() }

// Changed returns j back in Queued with the file's new size and mtime, to
// be checked and hashed again once it has settled. Everything derived from
// the old content is dropped.
func (s *Source) Changed(j state.Job, fi fs.FileInfo, why string) (state.Job, error) {
	now := s.env.Now()
	old := j
	if err := j.Reset(state.ResetChanged, now); err != nil {
		return j, err
	}
	DropEncoded(old)
	j.Size, j.ModTime = fi.Size(), fi.ModTime()
	j.NextAttempt = now.Add(s.env.Settle)
	j.LastError, j.LastStatus = why, 0
	return j, nil
}

// incomplete marks splatfile.ErrIncomplete for the retry rule (state must
// not import splatfile), with the file's mtime: a file still incomplete
// incomplete_timeout after it last changed fails.
type incomplete struct {
	err     error
	changed time.Time
}

func (e *incomplete) Error() string        { return e.err.Error() }
func (e *incomplete) Unwrap() error        { return e.err }
func (e *incomplete) Incomplete() bool     { return true }
func (e *incomplete) ChangedAt() time.Time { return e.changed }

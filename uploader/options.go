package uploader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Store is what the worker pool needs from the job store. queue.Store
// implements it; the interface lives here, with its consumer, so that
// uploader does not depend on bbolt.
type Store interface {
	// Claim hands out the earliest due job nobody else holds.
	Claim(now time.Time) (job state.Job, ok bool, err error)
	// NextDue says when the earliest unclaimed job becomes runnable.
	NextDue() (at time.Time, ok bool)
	// Release gives a claimed job back.
	Release(id uint64)
	// Commit stores j moved on from stage from, atomically, and returns
	// the job as stored (which may differ: content dedupe).
	Commit(j state.Job, from state.Stage) (state.Job, error)
	// Unfinalized lists final jobs whose after-action stage has not completed.
	Unfinalized() ([]state.Job, error)
	// MarkFinalized records that the after-action stage completed.
	MarkFinalized(id uint64) error
}

// Files is how the pool reaches a file under a watch root and what the
// configuration says of it. Its methods must not block.
type Files interface {
	// FS is the trust boundary every access under a watch folder goes
	// through (nil: one that knows no watch folders). The pool asks it
	// once, in NewPool.
	FS() *trustfs.FS
	// Params is the publish parameters of the file at path under root,
	// last changed at mod (Title is already resolved).
	Params(path, root string, mod time.Time) (state.PublishParams, error)
	// FollowSymlinks says whether root's files may be links that stay
	// inside it (follow_symlinks); elsewhere such a link fails its job.
	FollowSymlinks(root string) bool
	// SizeBounds is root's min_size and max_size (0: no bound), which an
	// unbundled SOG folder's bundle is held to before it is built.
	SizeBounds(root string) (minSize, maxSize int64)
}

// SidecarFiles is the Files of a pool without a configuration: Publish
// (Title a template) with each file's folder files and sidecar applied
// (sidecar.Resolve), read through Trust; no links followed, no size bounds.
type SidecarFiles struct {
	Publish state.PublishParams
	Trust   *trustfs.FS
}

func (s SidecarFiles) FS() *trustfs.FS { return s.Trust }
func (s SidecarFiles) Params(path, root string, mod time.Time) (state.PublishParams, error) {
	return sidecar.Resolve(s.Trust, s.Publish, path, root, mod)
}
func (SidecarFiles) FollowSymlinks(string) bool       { return false }
func (SidecarFiles) SizeBounds(string) (int64, int64) { return 0, 0 }

// Finisher runs the after-action stage of a job that became final (its
// receipt, move or delete, then its notifications). An error is retried
// on the after-action patience and at the next start until it succeeds.
type Finisher interface {
	Finish(ctx context.Context, j state.Job) error
}

// Peers is what the pool learns of the other daemons of its fleet.
type Peers interface {
	// Receipt reads the receipt another daemon wrote for j's file: its
	// outcome when it proves j's content published through this protocol
	// and service, ErrNoPeerReceipt while there is none, another error
	// when none can come. A job waits PeerWait at most for one (uploader/v1, peer.go).
	Receipt(j state.Job) (PeerOutcome, error)
	// Fleet names the fleet's live members, whose shares of a shared
	// folder this daemon leaves to them (uploader/fleet); nil: no shares. The
	// pool asks it once, in NewPool.
	Fleet() Fleet
}

// PollOptions paces the polling of a published splat until processing ends.
type PollOptions struct {
	Interval    time.Duration // first pause; doubles each poll. Zero: Defaults
	MaxInterval time.Duration // cap of the pause. Zero: Defaults
	Timeout     time.Duration // since publish; then the job fails. Zero: Defaults
}

// Timing is the pool's pauses, bounds and retry patience. A zero field is
// Defaults' value.
type Timing struct {
	// Settle is how long a changed file must stay unchanged before it is
	// hashed (and the first pause for one still incomplete).
	Settle time.Duration
	Poll   PollOptions
	// Grace is how long steps in flight may run once Run's context ends.
	Grace time.Duration
	// URLMaxAge is the age after which a stored signed URL is signed again.
	URLMaxAge time.Duration
	// TokenRecheck is how often a paused pool re-reads the token source.
	TokenRecheck time.Duration
	// ProbeAPI, when set, probes the token as the pool starts and, every
	// ProbeAPI, while the API's last calls got no answer. Zero: no probes
	// but the token pause's.
	ProbeAPI time.Duration
	// PeerWait is how long a v1 job on another daemon's session waits for
	// its progress or receipt before it sends or replays the rest itself.
	PeerWait time.Duration
	// IncompleteTimeout fails a file still incomplete this long after it
	// last changed (incomplete_timeout); negative: never.
	IncompleteTimeout time.Duration
	// RefusedGrace is how long a host may refuse connections before that
	// pauses the pool as a configuration error. Zero: 2 min.
	RefusedGrace time.Duration
	// MaxServerWait caps a delay a server asks for (Retry-After, a reset).
	MaxServerWait time.Duration
	// Patience overrides the retry rule's profiles (state.DefaultPatience);
	// nil: the defaults. Tests use short ones.
	Patience map[state.Profile]state.Patience
	// Rand is the backoffs' jitter source; nil: math/rand/v2.
	Rand func() float64
}

// PoolOptions configures NewPool.
type PoolOptions struct {
	Store  Store
	Client *api.Client
	// Files reaches the watch folders' files and answers their publish
	// parameters, follow_symlinks and size bounds. Nil: SidecarFiles{}.
	Files Files
	// After runs the after-action stage of final jobs. Nil: none.
	After Finisher
	// Peers are the fleet's other daemons. Nil: no receipts, no shares.
	Peers Peers
	// Observer is told what the pool does. Nil: NopObserver.
	Observer Observer
	Logger   zerolog.Logger
	// Workers is the number of jobs advanced at the same time.
	Workers int
	// Protocol is the API new jobs are published through: ProtocolLegacy
	// (default) or ProtocolV1. A job that has started keeps its own.
	Protocol string
	// ParallelParts is the number of v1 part PUTs in flight per job, 1..16.
	ParallelParts int
	// OnUncertain is UncertainRepublish (default) or UncertainHold.
	OnUncertain string
	// WorkDir holds the pool's own files: the encodings that
	// publish.encode makes (encoded/) and unbundled SOG folders' bundles
	// (sog-bundles/); never a watch folder. Empty: encodings are refused
	// and bundles go under the system's temporary directory.
	WorkDir string
	Timing  Timing
	// Now is the clock (tests inject one).
	Now func() time.Time

	// workerHook, set only by tests, is called at named points between a
	// side effect and a commit; a non-nil error stops the pool at once as if
	// the process had died there.
	workerHook func(point string, j state.Job) error
}

// What to do with a job found in Publishing after a restart (or after a
// publish call whose answer was lost): its splat may or may not exist.
const (
	// UncertainRepublish publishes again: at worst the splat exists twice.
	UncertainRepublish = "republish"
	// UncertainHold parks the job in stage held for an operator.
	UncertainHold = "hold"
)

// fill checks o and sets every zero option to its default.
func (o *PoolOptions) fill() error {
	if o.Store == nil || o.Client == nil {
		return errors.New("uploader: pool needs a Store and a Client")
	}
	var err error
	if o.OnUncertain, err = checkUncertain(o.OnUncertain); err != nil {
		return err
	}
	if err := o.fillProtocol(); err != nil {
		return err
	}
	def := Defaults()
	if o.Workers <= 0 {
		o.Workers = def.Workers
	}
	if o.Files == nil {
		o.Files = SidecarFiles{}
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Timing.fill(def.Timing)
	return nil
}

// checkUncertain checks an OnUncertain value; "" is UncertainRepublish.
func checkUncertain(s string) (string, error) {
	switch s {
	case "":
		return UncertainRepublish, nil
	case UncertainRepublish, UncertainHold:
		return s, nil
	}
	return "", fmt.Errorf("uploader: publish.on_uncertain must be %q or %q, not %q", UncertainRepublish, UncertainHold, s)
}

// fill sets t's zero fields to def's.
func (t *Timing) fill(def Timing) {
	if t.Poll.Interval <= 0 {
		t.Poll.Interval = def.Poll.Interval
	}
	if t.Poll.MaxInterval < t.Poll.Interval {
		t.Poll.MaxInterval = max(def.Poll.MaxInterval, t.Poll.Interval)
	}
	if t.Poll.Timeout <= 0 {
		t.Poll.Timeout = def.Poll.Timeout
	}
	for _, d := range []struct{ v, def *time.Duration }{
		{&t.Settle, &def.Settle}, {&t.TokenRecheck, &def.TokenRecheck}, {&t.Grace, &def.Grace},
		{&t.URLMaxAge, &def.URLMaxAge}, {&t.MaxServerWait, &def.MaxServerWait}, {&t.PeerWait, &def.PeerWait},
	} {
		if *d.v <= 0 {
			*d.v = *d.def
		}
	}
	if t.IncompleteTimeout == 0 {
		t.IncompleteTimeout = def.IncompleteTimeout
	}
	if t.Rand == nil {
		t.Rand = rand.Float64
	}
}

// dirs are the encodings' and the bundles' folders of o.WorkDir (no
// encodeDir without one: encodings are refused).
func (o *PoolOptions) dirs() (encodeDir, bundleDir string) {
	if o.WorkDir == "" {
		return "", filepath.Join(os.TempDir(), "splatd-sog-bundles")
	}
	return filepath.Join(o.WorkDir, "encoded"), filepath.Join(o.WorkDir, "sog-bundles")
}

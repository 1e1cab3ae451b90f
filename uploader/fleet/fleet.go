// Package fleet is a pool's view of the other daemons of its fleet: their
// receipts, and the shares of a shared folder each publishes
// (docs/architecture.md, "Peers' sessions" and "Shares of a shared folder").
package fleet

import (
	"errors"
	"io/fs"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// Outcome is the outcome of a job's content that another daemon of the
// fleet reached, as its receipt says.
type Outcome struct {
	SplatID, SplatHash, ViewerURL, EditURL string
	PublishedAt, CompletedAt               *time.Time
	// Receipt is the receipt's path, named in the job's message.
	Receipt string
}

// ErrNoReceipt is Receipts.Receipt's answer while the job's file has no
// receipt that proves its content published (yet): the job waits on. Any
// other error means none will come (the file is gone).
var ErrNoReceipt = errors.New("no receipt from another daemon for this content")

// Receipts reads the receipts the fleet's other daemons write.
type Receipts interface {
	// Receipt reads the receipt another daemon wrote for j's file: its
	// outcome when it proves j's content published through this protocol
	// and service, ErrNoReceipt while there is none, another error when
	// none can come.
	Receipt(j state.Job) (Outcome, error)
}

// Members names the daemons of a fleet on a job's watch folder, so that
// the backlog is cut into shares.
type Members interface {
	// Self is this daemon's member key.
	Self() string
	// Members are the live members announced on root (this daemon among
	// them), each with the nonce of its current start; known is false
	// while they cannot be known yet (just started).
	Members(root string) (members map[string]string, known bool)
}

// Options configures New.
type Options struct {
	Receipts Receipts // nil: no receipts, no shares
	Members  Members  // nil: no shares
	// V1 says new jobs publish through v1: only then are shares worked and
	// a gone file's receipt looked for.
	V1           bool
	Now          func() time.Time
	PollInterval time.Duration // the least pause between two looks at a share's receipt
	Log          zerolog.Logger
}

// View is a pool's view of its fleet, in memory only.
type View struct {
	o Options

	mu       sync.Mutex
	lastOwn  time.Time            // this daemon's latest own publish, or its start
	gaps     []time.Duration      // the latest gaps between its own publishes
	progress map[string]time.Time // each peer's latest receipt seen
	lost     map[string]string    // peers taken for lost, by the nonce they had
	since    map[uint64]waitOn    // jobs waiting on a peer: which, since when
	taken    map[uint64]bool      // jobs taken over from a lost peer
}

// New returns the view of o's fleet, as of now.
func New(o Options) *View {
	return &View{o: o, lastOwn: o.Now(), progress: map[string]time.Time{}, lost: map[string]string{},
		since: map[uint64]waitOn{}, taken: map[uint64]bool{}}
}

// HasReceipts reports whether the fleet's receipts are read at all.
func (v *View) HasReceipts() bool { return v.o.Receipts != nil }

// Receipt reads the receipt a peer wrote for j's file (Receipts.Receipt);
// only when HasReceipts.
func (v *View) Receipt(j state.Job) (Outcome, error) { return v.o.Receipts.Receipt(j) }

// FromPeer reports a job whose outcome, and after-action, are a peer's.
func FromPeer(j state.Job) bool { return j.V1 != nil && j.V1.FromPeer }

// goneApplies reports whether a v1 fleet's receipt may explain err, a
// file not found.
func (v *View) goneApplies(err error) bool {
	return v.o.Receipts != nil && v.o.V1 && errors.Is(err, fs.ErrNotExist)
}

// Gone ends a job whose file is gone before it was read (a fleet peer
// published it and deleted it, on_success: delete, or moved it,
// on_success: move) as done with the outcome of the receipt the peer left
// where the file was or took along, instead of failing it: ok is false
// when there is no such receipt (v1 fleets only).
func (v *View) Gone(j state.Job, openErr error) (state.Job, bool, error) {
	if !v.goneApplies(openErr) {
		return j, false, nil
	}
	out, err := v.o.Receipts.Receipt(j)
	if err != nil {
		return j, false, nil
	}
	next, err := peerDone(j, v.o.Now(), out, "published by another daemon of the fleet, which then deleted or moved the file: taken from its receipt "+out.Receipt)
	if err != nil {
		return j, false, err
	}
	v.o.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("splat", out.SplatID).
		Msg("file gone before it was read; another daemon published it (its receipt names the splat)")
	return next, true, nil
}

// PublishedElsewhere reports whether statErr, a file gone after it was
// read, is explained by a fleet peer's receipt proving its content
// published (the peer deleted or moved the file after publishing it).
func (v *View) PublishedElsewhere(j state.Job, statErr error) bool {
	if !v.goneApplies(statErr) {
		return false
	}
	_, err := v.o.Receipts.Receipt(j)
	return err == nil
}

// peerDone ends queued job j as done with the outcome a peer's receipt
// gives, running no after-action of its own (the peer ran it).
func peerDone(j state.Job, now time.Time, out Outcome, message string) (state.Job, error) {
	if err := j.Move(state.Done, now); err != nil {
		return j, err
	}
	j.SplatID, j.SplatHash, j.ViewerURL = out.SplatID, out.SplatHash, out.ViewerURL
	j.PublishedAt, j.CompletedAt = out.PublishedAt, out.CompletedAt
	j.TaskStatus, j.TaskMessage = "done", message
	j.Protocol, j.V1 = state.ProtocolV1, &state.Session{FromPeer: true, EditURL: out.EditURL}
	j.LastError, j.LastStatus = "", 0
	return j, nil
}

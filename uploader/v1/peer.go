package v1

import (
	"errors"
	"fmt"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/fleet"
)

// A job that meets a fleet peer's upload session is parked (Job.Parked),
// holding no worker: while the session uploads (watchPeer) and, once the
// peer completed it, until the peer's receipt names the splat
// (awaitReceipt); docs/architecture.md, "Peers' sessions".

// exists records that the session was completed (by us before a crash,
// or by a peer): the splat exists and nothing is uploaded again. The splat
// id is taken from the session when it names it, else from the receipt of
// the peer that completed it (awaitReceipt), else the complete is
// replayed (200, same body), once.
func (p *Protocol) exists(j state.Job, s api.UploadSession, to state.Stage) (state.Job, error) {
	syncParts(&j, s)
	if s.SplatID == "" {
		// A peer's session: its receipt names the splat, at no API cost.
		if next, parked, err := p.awaitReceipt(j, to); parked || err != nil {
			return next, err
		}
	}
	next, err := p.env.Move(j, to, "")
	if err != nil {
		return j, err
	}
	next.SplatID = s.SplatID
	p.env.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Str("status", string(s.Status)).
		Str("splat", s.SplatID).Msg("upload session already completed: not uploading again")
	return next, nil
}

// fromReceipt moves j to stage `to` with the outcome a peer's receipt
// gives (parked is true: the caller is done).
func (p *Protocol) fromReceipt(j state.Job, to state.Stage, out fleet.Outcome) (state.Job, bool, error) {
	next, err := p.env.Move(j, to, "")
	if err != nil {
		return j, true, err
	}
	next.SplatID, next.SplatHash, next.ViewerURL = out.SplatID, out.SplatHash, out.ViewerURL
	next.PublishedAt, next.CompletedAt = out.PublishedAt, out.CompletedAt
	next.TaskMessage = "published by another daemon of the fleet: taken from its receipt " + out.Receipt
	next.V1.EditURL, next.V1.FromPeer, next.V1.ReceiptSince = out.EditURL, true, time.Time{}
	p.env.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", j.V1.ID).Str("splat", out.SplatID).
		Msg("another daemon completed this content's session: its receipt names the splat")
	return next, true, nil
}

// waiting continues the wait for a peer's receipt of a job that began it
// (before any API call). ok is false when the job is not waiting.
func (p *Protocol) waiting(j state.Job) (state.Job, bool, error) {
	if j.V1 == nil || j.V1.ReceiptSince.IsZero() || j.SplatID != "" || (j.Stage != state.Signed && j.Stage != state.Uploaded) {
		return j, false, nil
	}
	to := state.Uploaded
	if j.Stage == state.Uploaded {
		to = state.Publishing
	}
	next, parked, err := p.awaitReceipt(j, to)
	if parked || err != nil {
		return next, true, err
	}
	// No receipt within the bound: on to a replayed complete.
	next, err = p.env.Move(next, to, "")
	return next, true, err
}

// awaitReceipt looks for the receipt of the peer that completed j's
// session. With one, j moves to stage `to` with the peer's outcome
// (parked is true: the caller is done). Without one yet, j is parked until
// its next look. parked is false when the complete must be replayed: j's
// own session (a crash between complete and its commit), no receipts in
// this fleet, or no receipt within the bound.
func (p *Protocol) awaitReceipt(j state.Job, to state.Stage) (next state.Job, parked bool, err error) {
	v := j.V1
	if !p.fleet.HasReceipts() || v.NoReceipt {
		return j, false, nil
	}
	if v.Owned {
		// Ours, or taken to be (a create of ours whose answer was lost: a
		// crash before the answer was committed): no wait. A receipt that
		// is already there says a peer completed it after all, and reading
		// it costs nothing where the replay costs a strict request. Not for
		// a republish or a session made again: a receipt of the content's
		// earlier splat would be taken for this one.
		if j.Generation == 0 && v.Attempt <= 1 {
			if out, err := p.fleet.Receipt(j); err == nil {
				return p.fromReceipt(j, to, out)
			}
		}
		return j, false, nil
	}
	now := p.env.Now()
	if v.ReceiptSince.IsZero() {
		v.ReceiptSince, v.PeerPolls = now, 0
	}
	out, err := p.fleet.Receipt(j)
	left := v.ReceiptSince.Add(p.env.Timing.PeerWait).Sub(now)
	switch {
	case err == nil:
		return p.fromReceipt(j, to, out)
	case errors.Is(err, fleet.ErrNoReceipt) && left > 0:
		v.PeerPolls++
		d := state.Backoff{Base: p.env.Timing.PollInterval, Cap: p.env.Timing.PollMaxInterval, Jitter: state.NoJitter}.Delay(v.PeerPolls)
		j.NextAttempt = now.Add(min(d, left))
		j.LastError, j.LastStatus = "", 0
		j.Parked = fmt.Sprintf("another daemon completed this content's upload session; waiting for its receipt (at most %s more, then complete is replayed once to learn the splat)", left.Round(time.Second))
		return j, true, nil
	}
	why := "none came within " + p.env.Timing.PeerWait.String()
	if !errors.Is(err, fleet.ErrNoReceipt) {
		why = err.Error()
	}
	p.env.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", v.ID).Str("why", why).
		Msg("no receipt from the daemon that completed this content's session: replaying complete for the splat's id")
	v.NoReceipt, v.ReceiptSince = true, time.Time{}
	return j, false, nil
}

// peerDone moves a job whose outcome a peer's receipt gave to processing,
// due now: its poll is answered by the receipt (no API call).
func (p *Protocol) peerDone(j state.Job, splatID string) (state.Job, error) {
	now := p.env.Now()
	pub, done := j.PublishedAt, j.CompletedAt
	next, err := p.env.Published(j, now, splatID)
	if err != nil {
		return j, err
	}
	next.NextAttempt = now
	if pub != nil {
		next.PublishedAt = pub
	}
	next.CompletedAt = done
	return next, nil
}

// readyGone sends a job that read its file, and finds it gone before
// its create, back to queued when a fleet peer's receipt proves its content
// published (the peer deleted or moved the file after publishing it):
// the queued check (content.Source.Check) then ends it done with that outcome (fleet.View.Gone), since the
// stage table has no edge from ready to done. ok is false, and the job
// fails as gone, when there is no such receipt.
func (p *Protocol) readyGone(j state.Job, statErr error) (state.Job, bool, error) {
	if !p.fleet.PublishedElsewhere(j, statErr) {
		return j, false, nil
	}
	next, err := p.env.Move(j, state.Queued, "file gone: another daemon of the fleet published it, its receipt says")
	return next, true, err
}

// watchPeer paces a job whose session another daemon created: while
// that session's parts keep growing (or for PeerWait after they last grew)
// the job only reads it again later; then it takes the session over and
// sends the missing parts itself. wait is false when it is time to send.
func (p *Protocol) watchPeer(j state.Job, s api.UploadSession) (next state.Job, wait bool) {
	now := p.env.Now()
	v := j.V1
	have := v.Stored()
	if v.PeerSince.IsZero() || have > v.PeerParts {
		v.PeerSince, v.PeerParts, v.PeerPolls = now, have, 0
	}
	left := v.PeerSince.Add(p.env.Timing.PeerWait).Sub(now)
	if left <= 0 {
		p.env.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Int("parts", have).Int("of", v.Parts).
			Float64("idle_s", now.Sub(v.PeerSince).Seconds()).Msg("another daemon's upload session made no progress: sending the missing parts")
		v.Owned = true
		return j, false
	}
	v.PeerPolls++
	d := state.Backoff{Base: p.env.Timing.PollInterval, Cap: p.env.Timing.PollMaxInterval, Jitter: state.NoJitter}.Delay(v.PeerPolls)
	j.NextAttempt = now.Add(min(d, left))
	j.LastError, j.LastStatus = "", 0
	j.Parked = fmt.Sprintf("another daemon is uploading this content's session (%d of %d parts stored)", have, v.Parts)
	return j, true
}

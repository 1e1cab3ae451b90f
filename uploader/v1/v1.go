// Package v1 is the steps of the SuperSplat API v1 (docs/api-v1.md) from
// ready to processing, on the stages as docs/architecture.md ("Job
// stages") gives them under v1: every side effect follows the commit it
// depends on, and on resume the server's record of the session is the
// truth. A fleet peer's session is watched or its receipt awaited here.
package v1

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/fleet"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
)

// MaxParallelParts bounds upload.parallel_parts.
const MaxParallelParts = 16

const (
	// maxPartTries is how many times in a row one part is tried inside a
	// step (retry or re-sign, as the retry rule decides) before the error
	// goes to the job's own retry, which records it and backs off.
	maxPartTries = 3
	// maxResyncs bounds the complete refusals (400, 409) answered by
	// re-reading the session: a server that keeps refusing the parts it
	// lists fails the job rather than looping.
	maxResyncs = 3
	// signAhead is how many part URLs one call signs, in units of
	// ParallelParts: enough to keep the PUTs going between calls, few enough
	// that a URL is used soon after it was signed.
	signAhead = 4
)

// Protocol is the v1 protocol's steps, run by the pool.
type Protocol struct {
	env      *step.Env
	fleet    *fleet.View
	parallel int // part PUTs in flight per job (upload.parallel_parts)
}

// New returns the v1 steps over env, with parallel part PUTs per job and
// the fleet's view.
func New(env *step.Env, fleet *fleet.View, parallel int) *Protocol {
	return &Protocol{env: env, fleet: fleet, parallel: parallel}
}

// Step performs the side effect of j's stage under v1 and returns the job
// to commit. An error is classified by the pool (retry, fail, pause).
func (p *Protocol) Step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	// The job is this step's own: the session must not be shared with the
	// caller's copy, which advance keeps to report a crash.
	if j.V1 != nil {
		s := *j.V1
		s.ETags = slices.Clone(s.ETags)
		j.V1 = &s
	}
	j.Parked = "" // each step says again why the job waits, if it does
	if next, ok, err := p.waiting(j); ok {
		return next, err
	}
	switch j.Stage {
	case state.Ready:
		return p.create(ctx, t, j)
	case state.Signed:
		return p.parts(ctx, t, j)
	case state.Uploaded:
		return p.intent(ctx, t, j)
	case state.Publishing:
		return p.complete(ctx, t, j)
	case state.Processing:
		return p.poll(ctx, t, j)
	}
	return j, fmt.Errorf("job %d: no v1 step for stage %s", j.ID, j.Stage)
}

// sessionKey is the Idempotency-Key of a job's session: derived only from what
// the job records before its create call, so that a restart, or another
// daemon that sees the same content, sends the same key; a new generation
// (a deliberate republish) or a new attempt (a lost session) a new one.
func sessionKey(sha256 string, generation, attempt int) string {
	return fmt.Sprintf("splatd-%s-g%d-s%d", sha256, generation, attempt)
}

// sourceFormat maps the content check's kind to the create's sourceFormat.
func sourceFormat(kind string) (api.SourceFormat, error) {
	if f := api.SourceFormat(splatfile.Kind(kind).SourceFormat()); f.Valid() {
		return f, nil
	}
	return "", &step.FileError{Err: fmt.Errorf("no v1 sourceFormat for content kind %q", kind)}
}

// create: ready → signed. The key, and the fact that one more create is
// about to be sent under it, are committed before the call: a restart sends
// the same key, and a create answered 200 when it is the first one under
// its key proves that another daemon made the session.
func (p *Protocol) create(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if j.SHA256 == "" {
		return j, fmt.Errorf("job %d: ready without sha256", j.ID)
	}
	format, err := sourceFormat(j.UploadKind())
	if err != nil {
		return j, err
	}
	attempt := 1
	if j.V1 != nil {
		attempt = max(1, j.V1.Attempt)
	}
	key := sessionKey(step.UploadContent(j), j.Generation, attempt)
	if j.V1 != nil && j.V1.Key == key && j.V1.ID != "" {
		// The session is known (a complete found parts missing, or storage
		// refused a part URL): take it up again; the parts step reads it.
		return p.env.Move(j, state.Signed, "")
	}
	fi, err := p.env.Pool.CheckName(j)
	if err != nil {
		if next, ok, perr := p.readyGone(j, err); ok || perr != nil {
			return next, perr
		}
		return j, err
	}
	if !step.IsRecorded(fi, j) {
		return p.env.Pool.Changed(j, fi, "file changed since it was hashed; hashing again")
	}
	if j.V1 == nil || j.V1.Key != key {
		j.V1 = &state.Session{Attempt: attempt, Key: key}
	}
	j.Protocol = state.ProtocolV1
	j.V1.Creates++
	stored, err := p.env.Pool.Commit(ctx, j, state.Ready)
	if err != nil {
		return j, fmt.Errorf("commit job %d create intent: %w", j.ID, err)
	}
	j = stored
	if err := p.env.Pool.Hook("v1:create", j); err != nil {
		return j, err
	}
	s, created, err := p.env.Client.Paced(t).CreateUpload(ctx, key, api.CreateUploadRequest{
		SourceFormat:  format,
		ContentLength: j.UploadSize(),
		Title:         j.Params.Title,
		Description:   j.Params.Description,
	})
	if err != nil {
		if _, parked := errors.AsType[*pace.Parked](err); parked {
			j.V1.Creates-- // not sent: undone with the park (a crash before it leaves it counted)
		}
		// A lost answer is sent again with the same key (the server answers
		// with the same session); 413 fails the job with the server's text.
		return j, err
	}
	return p.created(j, s, created)
}

// created moves j to signed with the session its create answered: the
// session's id and parts, and whether it is this daemon's own.
func (p *Protocol) created(j state.Job, s api.UploadSession, created bool) (state.Job, error) {
	next, err := p.env.Move(j, state.Signed, "")
	if err != nil {
		return j, err
	}
	v := next.V1
	v.ID, v.PartSize = s.ID, s.PartSize
	v.Parts = PartCount(j.UploadSize(), s.PartSize)
	v.ETags = make([]string, v.Parts)
	// 201: ours. 200 to our first create under this key: a peer's, unless
	// no peer is live (then ours, from before the store was lost). 200
	// after an earlier create of ours whose answer never came: most likely
	// ours, and treating it so costs at worst some parts sent twice.
	v.Owned = created || v.Creates > 1 || p.fleet.TakenOver(j.ID) || p.fleet.Alone(j.Root)
	ev := p.env.Log.Debug()
	if !v.Owned {
		ev = p.env.Log.Info()
		v.PeerSince = p.env.Now()
	}
	ev.Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Bool("created", created).Bool("owned", v.Owned).
		Int("parts", v.Parts).Int64("part_size", v.PartSize).Msg("v1 upload session")
	return next, nil
}

// back sends a job whose session must be taken up again (or replaced)
// back to the create step: from signed to ready; from uploaded, which the
// table lets go back only to queued ("never re-signed after upload"),
// through queued, where the file is checked again (its hash is kept while
// its size and mtime are unchanged) before any byte is sent again.
func (p *Protocol) back(j state.Job, why string) (state.Job, error) {
	if j.Stage == state.Signed {
		return p.env.Move(j, state.Ready, why)
	}
	return p.env.Move(j, state.Queued, why)
}

// lost replaces a session that is gone (404) or canceled: the next
// attempt's key is committed with the move back, before its create.
// From the second lost session on, the new one waits the retry rule's
// backoff, and a bounded patience fails the job once its tries are spent.
func (p *Protocol) lost(j state.Job, why string) (state.Job, error) {
	attempt := j.V1.Attempt + 1
	now := p.env.Now()
	var delay time.Duration
	if lost := attempt - 1; lost > 1 {
		d := p.env.Policy.Decide(context.Background(), errors.New(why), lost, now)
		if d.Action == state.Fail {
			return p.env.Fail(j, now, fmt.Errorf("the server lost %d upload sessions of this file: %s", lost, why)), nil
		}
		delay = d.Delay
	}
	p.env.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", j.V1.ID).Int("attempt", attempt).
		Float64("retry_in_s", delay.Seconds()).Msg(why + ": creating a new session under a new key")
	next, err := p.back(j, why)
	if err != nil {
		return j, err
	}
	next.V1 = &state.Session{Attempt: attempt, Key: sessionKey(step.UploadContent(j), j.Generation, attempt)}
	next.SplatID = ""
	next.NextAttempt = now.Add(delay)
	return next, nil
}

// ended handles a session read back that is no longer open: one completed
// (or processing) is taken up at stage at, a canceled one replaced; over
// is false while the session still takes parts.
func (p *Protocol) ended(j state.Job, s api.UploadSession, at state.Stage) (next state.Job, over bool, err error) {
	switch s.Status {
	case api.UploadProcessing, api.UploadCompleted:
		next, err = p.exists(j, s, at)
		return next, true, err
	case api.UploadCanceled:
		next, err = p.lost(j, "upload session was canceled")
		return next, true, err
	}
	return j, false, nil
}

// intent: uploaded → publishing, the complete intent. After a refused
// complete the session is read first: parts it lacks send the job back
// (through queued) to take it up again, a lost session to a new one.
func (p *Protocol) intent(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if j.SplatID == "" && j.V1.Verify {
		s, err := p.env.Client.Paced(t).GetUpload(ctx, j.V1.ID)
		if state.HTTPStatus(err) == http.StatusNotFound {
			return p.lost(j, "upload session is gone (404)")
		}
		if err != nil {
			return j, err
		}
		if next, over, err := p.ended(j, s, state.Publishing); over {
			return next, err
		}
		j.V1.Verify = false
		if missing := syncParts(&j, s); len(missing) > 0 {
			p.env.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Ints("missing", missing).
				Msg("the server lacks parts: sending them again")
			return p.back(j, fmt.Sprintf("the server lacks %d of %d parts", len(missing), j.V1.Parts))
		}
	}
	if j.SplatID == "" {
		// Uploaded content that is no longer the file's is never
		// published (as under legacy). A file that is gone may have been
		// moved by a peer that completed this very session: read it.
		fi, err := p.env.Pool.CheckName(j)
		var fe *step.FileError
		switch {
		case err == nil && !step.IsRecorded(fi, j):
			return p.env.Pool.Changed(j, fi, "file changed after its upload; hashing it again")
		case errors.As(err, &fe):
			s, serr := p.env.Client.Paced(t).GetUpload(ctx, j.V1.ID)
			if _, parked := errors.AsType[*pace.Parked](serr); parked {
				return j, serr
			}
			if serr != nil || (s.Status != api.UploadProcessing && s.Status != api.UploadCompleted) {
				return j, err
			}
			return p.exists(j, s, state.Publishing)
		case err != nil:
			return j, err
		}
	}
	next, err := p.env.Move(j, state.Publishing, "")
	next.Uncertain = false
	return next, err
}

// complete: publishing → processing. A complete whose answer was lost is
// simply sent again (200 with the same body); one refused with 400 or 409
// makes the job read the session before it completes again; 413 fails it.
func (p *Protocol) complete(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	j.Uncertain = false // nothing is uncertain under v1
	if j.SplatID != "" {
		return p.processing(j, j.SplatID, "")
	}
	parts := make([]api.CompletedPart, 0, j.V1.Parts)
	for i, e := range j.V1.ETags {
		if e == "" {
			j.V1.Verify = true
			return p.env.Move(j, state.Uploaded, fmt.Sprintf("part %d has no ETag", i+1))
		}
		parts = append(parts, api.CompletedPart{PartNumber: i + 1, ETag: e})
	}
	if err := p.env.Pool.Hook("v1:complete", j); err != nil {
		return j, err
	}
	comp, replayed, err := p.env.Client.Paced(t).CompleteUpload(ctx, j.V1.ID, parts)
	if _, parked := errors.AsType[*pace.Parked](err); parked {
		return j, err // not sent
	}
	j.Publishes++
	var ae *api.APIError
	if errors.As(err, &ae) && !ae.FromStorage() && j.V1.Resyncs < maxResyncs {
		switch ae.Status {
		case http.StatusBadRequest, http.StatusConflict, http.StatusNotFound:
			j.V1.Resyncs++
			j.V1.Verify = true
			p.env.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", j.V1.ID).Err(err).Msg("complete refused: reading the session")
			next, merr := p.env.Move(j, state.Uploaded, err.Error())
			next.LastStatus = ae.Status
			return next, merr
		}
	}
	if err != nil {
		return j, err
	}
	p.env.Log.Debug().Uint64("job", j.ID).Str("splat", comp.SplatID).Bool("replayed", replayed).Msg("upload completed")
	return p.processing(j, comp.SplatID, comp.EditURL)
}

// processing stores the splat id and starts polling.
func (p *Protocol) processing(j state.Job, splatID, editURL string) (state.Job, error) {
	if editURL != "" {
		j.V1.EditURL = editURL
	}
	if j.V1.FromPeer {
		return p.peerDone(j, splatID)
	}
	return p.env.Published(j, p.env.Now(), splatID)
}

// poll: processing → done | failed, or processing again later.
func (p *Protocol) poll(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.env.Now()
	if j.V1.FromPeer {
		// The peer's receipt says done: no poll.
		j.TaskStatus = string(api.SplatCompleted)
		return p.env.Polled(j, now, api.OutcomeDone, string(api.SplatCompleted), j.CompletedAt, nil)
	}
	if j, timedOut := p.env.PollTimedOut(j, now); timedOut {
		return j, nil
	}
	sp, err := p.env.Client.Paced(t).SplatV1(ctx, j.SplatID)
	if err != nil {
		return j, err
	}
	j.TaskStatus = string(sp.Status)
	if sp.ViewerURL != "" {
		j.ViewerURL = sp.ViewerURL
	}
	if sp.Format != "" {
		j.V1.Output = sp.Format
	}
	return p.env.Polled(j, now, sp.Outcome(), string(sp.Status), sp.CompletedAt, fmt.Errorf("processing failed (splat %s)", j.SplatID))
}

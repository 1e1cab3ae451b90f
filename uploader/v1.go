package uploader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
)

// The steps of the SuperSplat API v1 (docs/api-v1.md), on the stages as
// docs/architecture.md ("Job stages") gives them under v1: every side
// effect follows the commit it depends on, and on resume the server's
// record of the session is the truth.

// Protocols of PoolOptions.Protocol.
const (
	ProtocolLegacy = "legacy"
	ProtocolV1     = state.ProtocolV1
)

const (
	maxParallelParts = 16
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

// fillV1 checks and defaults the v1 options.
func (o *PoolOptions) fillV1() error {
	switch o.Protocol {
	case "":
		o.Protocol = ProtocolLegacy
	case ProtocolLegacy, ProtocolV1:
	default:
		return fmt.Errorf("uploader: api.protocol must be %q or %q, not %q", ProtocolLegacy, ProtocolV1, o.Protocol)
	}
	switch {
	case o.ParallelParts == 0:
		o.ParallelParts = Defaults().ParallelParts
	case o.ParallelParts < 1 || o.ParallelParts > maxParallelParts:
		return fmt.Errorf("uploader: upload.parallel_parts must be 1..%d, not %d", maxParallelParts, o.ParallelParts)
	}
	return nil
}

// usesV1 reports whether j advances by the v1 steps: a job that has begun
// under v1 keeps them whatever the configuration says now, and one that
// has not yet left ready follows the configuration.
func (p *Pool) usesV1(j state.Job) bool {
	if j.Protocol != "" {
		return j.Protocol == state.ProtocolV1
	}
	return j.Stage == state.Ready && p.o.Protocol == ProtocolV1
}

// stepV1 is step under the v1 protocol.
func (p *Pool) stepV1(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	// The job is this step's own: the session must not be shared with the
	// caller's copy, which advance keeps to report a crash.
	if j.V1 != nil {
		s := *j.V1
		s.ETags = slices.Clone(s.ETags)
		j.V1 = &s
	}
	j.Parked = "" // each step says again why the job waits, if it does
	if next, ok, err := p.v1Waiting(j); ok {
		return next, err
	}
	switch j.Stage {
	case state.Queued:
		return p.stepCheck(ctx, j)
	case state.Ready:
		return p.v1Create(ctx, t, j)
	case state.Signed:
		return p.v1Parts(ctx, t, j)
	case state.Uploaded:
		return p.v1Intent(ctx, t, j)
	case state.Publishing:
		return p.v1Complete(ctx, t, j)
	case state.Processing:
		return p.v1Poll(ctx, t, j)
	}
	return j, fmt.Errorf("job %d: no v1 step for stage %s", j.ID, j.Stage)
}

// v1Key is the Idempotency-Key of a job's session: derived only from what
// the job records before its create call, so that a restart, or another
// daemon that sees the same content, sends the same key; a new generation
// (a deliberate republish) or a new attempt (a lost session) a new one.
func v1Key(sha256 string, generation, attempt int) string {
	return fmt.Sprintf("splatd-%s-g%d-s%d", sha256, generation, attempt)
}

// v1SourceFormat maps the content check's kind to the create's sourceFormat.
func v1SourceFormat(kind string) (api.SourceFormat, error) {
	if f := api.SourceFormat(splatfile.Kind(kind).SourceFormat()); f.Valid() {
		return f, nil
	}
	return "", &workerFileError{fmt.Errorf("no v1 sourceFormat for content kind %q", kind)}
}

// v1Create: ready → signed. The key, and the fact that one more create is
// about to be sent under it, are committed before the call: a restart sends
// the same key, and a create answered 200 when it is the first one under
// its key proves that another daemon made the session.
func (p *Pool) v1Create(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if j.SHA256 == "" {
		return j, fmt.Errorf("job %d: ready without sha256", j.ID)
	}
	format, err := v1SourceFormat(j.UploadKind())
	if err != nil {
		return j, err
	}
	attempt := 1
	if j.V1 != nil {
		attempt = max(1, j.V1.Attempt)
	}
	key := v1Key(uploadContent(j), j.Generation, attempt)
	if j.V1 != nil && j.V1.Key == key && j.V1.ID != "" {
		// The session is known (a complete found parts missing, or storage
		// refused a part URL): take it up again; the parts step reads it.
		return p.v1Move(j, state.Signed, "")
	}
	fi, err := p.checkName(j)
	if err != nil {
		if next, ok, perr := p.readyGoneToPeer(j, err); ok || perr != nil {
			return next, perr
		}
		return j, err
	}
	if !isRecordedFile(fi, j) {
		return p.workerChanged(j, fi, "file changed since it was hashed; hashing again")
	}
	if j.V1 == nil || j.V1.Key != key {
		j.V1 = &state.Session{Attempt: attempt, Key: key}
	}
	j.Protocol = state.ProtocolV1
	j.V1.Creates++
	stored, err := p.commit(ctx, j, state.Ready)
	if err != nil {
		return j, fmt.Errorf("commit job %d create intent: %w", j.ID, err)
	}
	j = stored
	if err := p.hook("v1:create", j); err != nil {
		return j, err
	}
	s, created, err := p.o.Client.Paced(t).CreateUpload(ctx, key, api.CreateUploadRequest{
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
	return p.v1Created(j, s, created)
}

// v1Created moves j to signed with the session its create answered: the
// session's id and parts, and whether it is this daemon's own.
func (p *Pool) v1Created(j state.Job, s api.UploadSession, created bool) (state.Job, error) {
	next, err := p.v1Move(j, state.Signed, "")
	if err != nil {
		return j, err
	}
	v := next.V1
	v.ID, v.PartSize = s.ID, s.PartSize
	v.Parts = partCount(j.UploadSize(), s.PartSize)
	v.ETags = make([]string, v.Parts)
	// 201: ours. 200 to our first create under this key: a peer's, unless
	// no peer is live (then ours, from before the store was lost). 200
	// after an earlier create of ours whose answer never came: most likely
	// ours, and treating it so costs at worst some parts sent twice.
	v.Owned = created || v.Creates > 1 || p.shares.takenOver(j.ID) || p.alone(j.Root)
	ev := p.log.Debug()
	if !v.Owned {
		ev = p.log.Info()
		v.PeerSince = p.o.Now()
	}
	ev.Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Bool("created", created).Bool("owned", v.Owned).
		Int("parts", v.Parts).Int64("part_size", v.PartSize).Msg("v1 upload session")
	return next, nil
}

// v1Move moves j to stage `to`, due now, with why as its last error.
func (p *Pool) v1Move(j state.Job, to state.Stage, why string) (state.Job, error) {
	now := p.o.Now()
	if err := j.Move(to, now); err != nil {
		return j, err
	}
	j.NextAttempt, j.LastError, j.LastStatus = now, why, 0
	return j, nil
}

// v1Back sends a job whose session must be taken up again (or replaced)
// back to the create step: from signed to ready; from uploaded, which the
// table lets go back only to queued ("never re-signed after upload"),
// through queued, where the file is checked again (its hash is kept while
// its size and mtime are unchanged) before any byte is sent again.
func (p *Pool) v1Back(j state.Job, why string) (state.Job, error) {
	if j.Stage == state.Signed {
		return p.v1Move(j, state.Ready, why)
	}
	return p.v1Move(j, state.Queued, why)
}

// v1Lost replaces a session that is gone (404) or canceled: the next
// attempt's key is committed with the move back, before its create.
// From the second lost session on, the new one waits the retry rule's
// backoff, and a bounded patience fails the job once its tries are spent.
func (p *Pool) v1Lost(j state.Job, why string) (state.Job, error) {
	attempt := j.V1.Attempt + 1
	now := p.o.Now()
	var delay time.Duration
	if lost := attempt - 1; lost > 1 {
		d := p.policy.Decide(nil, errors.New(why), lost, now)
		if d.Action == state.Fail {
			return p.fail(j, now, fmt.Errorf("the server lost %d upload sessions of this file: %s", lost, why)), nil
		}
		delay = d.Delay
	}
	p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", j.V1.ID).Int("attempt", attempt).
		Float64("retry_in_s", delay.Seconds()).Msg(why + ": creating a new session under a new key")
	next, err := p.v1Back(j, why)
	if err != nil {
		return j, err
	}
	next.V1 = &state.Session{Attempt: attempt, Key: v1Key(uploadContent(j), j.Generation, attempt)}
	next.SplatID = ""
	next.NextAttempt = now.Add(delay)
	return next, nil
}

// v1Intent: uploaded → publishing, the complete intent. After a refused
// complete the session is read first: parts it lacks send the job back
// (through queued) to take it up again, a lost session to a new one.
func (p *Pool) v1Intent(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if j.SplatID == "" && j.V1.Verify {
		s, err := p.o.Client.Paced(t).GetUpload(ctx, j.V1.ID)
		if state.HTTPStatus(err) == http.StatusNotFound {
			return p.v1Lost(j, "upload session is gone (404)")
		}
		if err != nil {
			return j, err
		}
		switch s.Status {
		case api.UploadProcessing, api.UploadCompleted:
			return p.v1Exists(j, s, state.Publishing)
		case api.UploadCanceled:
			return p.v1Lost(j, "upload session was canceled")
		}
		j.V1.Verify = false
		if missing := v1Sync(&j, s); len(missing) > 0 {
			p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Ints("missing", missing).
				Msg("the server lacks parts: sending them again")
			return p.v1Back(j, fmt.Sprintf("the server lacks %d of %d parts", len(missing), j.V1.Parts))
		}
	}
	if j.SplatID == "" {
		// Uploaded content that is no longer the file's is never
		// published (as under legacy). A file that is gone may have been
		// moved by a peer that completed this very session: read it.
		fi, err := p.checkName(j)
		var fe *workerFileError
		switch {
		case err == nil && !isRecordedFile(fi, j):
			return p.workerChanged(j, fi, "file changed after its upload; hashing it again")
		case errors.As(err, &fe):
			s, serr := p.o.Client.Paced(t).GetUpload(ctx, j.V1.ID)
			if _, parked := errors.AsType[*pace.Parked](serr); parked {
				return j, serr
			}
			if serr != nil || (s.Status != api.UploadProcessing && s.Status != api.UploadCompleted) {
				return j, err
			}
			return p.v1Exists(j, s, state.Publishing)
		case err != nil:
			return j, err
		}
	}
	next, err := p.v1Move(j, state.Publishing, "")
	next.Uncertain = false
	return next, err
}

// v1Complete: publishing → processing. A complete whose answer was lost is
// simply sent again (200 with the same body); one refused with 400 or 409
// makes the job read the session before it completes again; 413 fails it.
func (p *Pool) v1Complete(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	j.Uncertain = false // nothing is uncertain under v1
	if j.SplatID != "" {
		return p.v1Processing(j, j.SplatID, "")
	}
	parts := make([]api.CompletedPart, 0, j.V1.Parts)
	for i, e := range j.V1.ETags {
		if e == "" {
			j.V1.Verify = true
			return p.v1Move(j, state.Uploaded, fmt.Sprintf("part %d has no ETag", i+1))
		}
		parts = append(parts, api.CompletedPart{PartNumber: i + 1, ETag: e})
	}
	if err := p.hook("v1:complete", j); err != nil {
		return j, err
	}
	comp, replayed, err := p.o.Client.Paced(t).CompleteUpload(ctx, j.V1.ID, parts)
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
			p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", j.V1.ID).Err(err).Msg("complete refused: reading the session")
			next, merr := p.v1Move(j, state.Uploaded, err.Error())
			next.LastStatus = ae.Status
			return next, merr
		}
	}
	if err != nil {
		return j, err
	}
	p.log.Debug().Uint64("job", j.ID).Str("splat", comp.SplatID).Bool("replayed", replayed).Msg("upload completed")
	return p.v1Processing(j, comp.SplatID, comp.EditURL)
}

// v1Processing stores the splat id and starts polling.
func (p *Pool) v1Processing(j state.Job, splatID, editURL string) (state.Job, error) {
	if editURL != "" {
		j.V1.EditURL = editURL
	}
	if j.V1.FromPeer {
		return p.v1PeerDone(j, splatID)
	}
	return p.published(j, p.o.Now(), splatID)
}

// v1Poll: processing → done | failed, or processing again later.
func (p *Pool) v1Poll(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.o.Now()
	if j.V1.FromPeer {
		// The peer's receipt says done: no poll.
		j.TaskStatus = string(api.SplatCompleted)
		return p.polled(j, now, api.OutcomeDone, string(api.SplatCompleted), j.CompletedAt, nil)
	}
	if j, timedOut := p.pollTimedOut(j, now); timedOut {
		return j, nil
	}
	sp, err := p.o.Client.Paced(t).SplatV1(ctx, j.SplatID)
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
	return p.polled(j, now, sp.Outcome(), string(sp.Status), sp.CompletedAt, fmt.Errorf("processing failed (splat %s)", j.SplatID))
}

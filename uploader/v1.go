package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
)

// The steps of the SuperSplat API v1 (docs/api-v1.md). The stages are the
// legacy ones with the meanings docs/architecture.md gives them under v1, and every
// side effect is preceded by the commit it depends on:
//
//	queued     → ready       content check and hash (the legacy step)
//	ready      → ready       Idempotency-Key and one more create counted, committed; then the create call
//	ready      → signed      session id and partSize stored
//	signed     → signed      each part's ETag, committed as that part completes
//	signed     → uploaded    every part's ETag stored
//	uploaded   → publishing  complete intent
//	publishing → processing  splat id stored (a lost answer: complete again, 200)
//	processing → done        SplatV1 polled until completed or failed
//
// The server is the truth on resume: a job found in signed reads the
// session and sends only the parts its uploadedParts lack. There is no
// uncertain outcome: create and complete are idempotent.

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

// partCount is N = ceil(size / partSize), at least 1.
func partCount(size, partSize int64) int {
	return max(1, int((size+partSize-1)/partSize))
}

// partRange is part n's offset and length: bytes [(n-1)·partSize,
// min(n·partSize, size)).
func partRange(size, partSize int64, n int) (off, length int64) {
	off = int64(n-1) * partSize
	return off, max(0, min(partSize, size-off))
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
	if !fileSame(fi, j) {
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
	ev.Uint64("job", j.ID).Str("path", j.Path).Str("upload", s.ID).Bool("created", created).Bool("owned", v.Owned).
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
func (p *Pool) v1Lost(j state.Job, why string) (state.Job, error) {
	attempt := j.V1.Attempt + 1
	p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Str("upload", j.V1.ID).Int("attempt", attempt).
		Msg(why + ": creating a new session under a new key")
	next, err := p.v1Back(j, why)
	if err != nil {
		return j, err
	}
	next.V1 = &state.Session{Attempt: attempt, Key: v1Key(uploadContent(j), j.Generation, attempt)}
	next.SplatID = ""
	return next, nil
}

// errV1Lost and errV1Conflict are part-upload-urls answers (404, 409) that
// send the parts step back to reading the session.
var (
	errV1Lost     = errors.New("upload session is gone")
	errV1Conflict = errors.New("upload session is not accepting parts")
)

// v1Sync applies the server's record of the session to j: its
// uploadedParts are the truth (a part known only locally is sent again; a
// part stored with another ETag than ours takes the server's). It returns
// the missing part numbers, ascending.
func v1Sync(j *state.Job, s api.UploadSession) []int {
	v := j.V1
	if s.PartSize > 0 && s.PartSize != v.PartSize {
		v.PartSize, v.Parts, v.ETags = s.PartSize, partCount(j.UploadSize(), s.PartSize), nil
	}
	if len(v.ETags) != v.Parts {
		v.ETags = make([]string, v.Parts)
	}
	server := make(map[int]string, len(s.UploadedParts))
	for _, up := range s.UploadedParts {
		if _, n := partRange(j.UploadSize(), v.PartSize, up.PartNumber); up.PartNumber > v.Parts || (up.HasSize && up.Size != n) {
			continue // not a part of this file as we cut it: ours is sent
		}
		server[up.PartNumber] = up.ETag
	}
	var missing []int
	for n := 1; n <= v.Parts; n++ {
		v.ETags[n-1] = server[n]
		if server[n] == "" {
			missing = append(missing, n)
		}
	}
	return missing
}

// v1Parts: signed → uploaded. It reads the session, then sends the parts
// the server lacks, up to ParallelParts at a time, committing each ETag.
func (p *Pool) v1Parts(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	for rereads := 0; ; rereads++ {
		sent := j.V1.Stored()
		s, err := p.o.Client.Paced(t).GetUpload(ctx, j.V1.ID)
		if state.HTTPStatus(err) == http.StatusNotFound {
			why := "upload session is gone (404)"
			if sent > 0 {
				why = fmt.Sprintf("the server lost the upload session (404), with the %d of %d parts sent to it", sent, j.V1.Parts)
			}
			return p.v1Lost(j, why)
		}
		if err != nil {
			return j, err
		}
		switch s.Status {
		case api.UploadProcessing, api.UploadCompleted:
			return p.v1Exists(j, s, state.Uploaded)
		case api.UploadCanceled:
			return p.v1Lost(j, "upload session was canceled")
		}
		missing := v1Sync(&j, s)
		if sent > 0 && rereads == 0 {
			p.log.Info().Uint64("job", j.ID).Str("path", j.Path).Str("upload", s.ID).Int("parts", j.V1.Parts).
				Int("server_holds", j.V1.Parts-len(missing)).Int("sent_before", sent).
				Msg(fmt.Sprintf("job %d's upload session holds %d of %d parts on the server: sending the %d missing", j.ID, j.V1.Parts-len(missing), j.V1.Parts, len(missing)))
		}
		// A peer's session is watched even once every part is stored: the
		// peer completes it, and completing it here too would only spend
		// the account's budget on a replay (a fleet drew 429s that way).
		if !j.V1.Owned {
			if next, wait := p.v1WatchPeer(j, s); wait {
				return next, nil
			}
		}
		if len(missing) == 0 {
			return p.v1Move(j, state.Uploaded, "")
		}
		next, err := p.v1Send(ctx, t, j, missing)
		switch {
		case errors.Is(err, errV1Lost):
			return p.v1Lost(next, "upload session is gone (404 at part-upload-urls)")
		case errors.Is(err, errV1Conflict) && rereads < 2:
			j = next
			continue
		}
		return next, err
	}
}

// signedPart is a part URL and the local time it was signed.
type signedPart struct {
	url api.PartURL
	at  time.Time
}

// usable reports whether the URL is still worth a PUT at now: not within
// the last quarter of its life. A URL whose expiry lies before its signing
// by our clock (clocks that disagree) is left to storage to judge.
func (u signedPart) usable(now time.Time) bool {
	life := u.url.ExpiresAt.Sub(u.at)
	if u.url.ExpiresAt.IsZero() || life <= 0 {
		return true
	}
	return now.Before(u.url.ExpiresAt.Add(-life / 4))
}

type partResult struct {
	n    int
	etag string
	err  error
}

// v1SendParts runs the parts' PUTs, at most ParallelParts at a time, each
// streamed from the file by offset. URLs are signed just before use, a few
// at a time. A part that fails is tried again (re-signed first when storage
// refused its URL) as the retry rule decides, up to maxPartTries in a row;
// then, or on an error the rule does not retry, no new part starts, those
// in flight finish, and the error is returned with the job as last
// committed. Each ETag is committed as its part completes, by this
// goroutine alone, so commits never race.
func (p *Pool) v1SendParts(ctx context.Context, t *pace.Caller, j state.Job, f *os.File, missing []int) (state.Job, error) {
	dctx, stopDrain := p.untilDrain(ctx)
	defer stopDrain()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s := &partSender{
		p:       p,
		ctx:     ctx,
		sign:    p.o.Client.Paced(t),
		signing: p.o.Client.Paced(p.o.Client.Pacer().Caller(j.ID, 0)),
		drain:   dctx,
		puts:    pctx,
		f:       f,
		j:       j,
		par:     p.o.ParallelParts,
		results: make(chan partResult, p.o.ParallelParts), // never blocks a PUT, even after a crash return
		queue:   slices.Clone(missing),
		tries:   make(map[int]int),
		urls:    make(map[int]signedPart),
		prog:    newPartProgress(p, j),
	}
	defer p.setProgress(j.ID, nil)
	done := ctx.Done()

	for {
		now := p.o.Now()
		s.requeueDue(now)
		s.startParts(now)
		if s.inflight == 0 && (s.stop != nil || len(s.queue) == 0 && len(s.later) == 0) {
			return s.j, s.stop
		}
		timer, tick := s.retryTimer(now)
		select {
		case r := <-s.results:
			s.inflight--
			if err := s.finished(r); err != nil {
				return s.j, err // a simulated death: nothing waits for the rest
			}
		case <-tick:
		case <-done:
			done = nil
			if s.stop == nil {
				s.stop = ctx.Err()
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// partSender is the state of one v1SendParts call. Only the goroutine that
// runs v1SendParts touches it; the PUTs report through results.
type partSender struct {
	p   *Pool
	ctx context.Context // the step's: signing, commits, the retry rule
	// sign signs the first URLs, before any PUT: a long delay parks the
	// job. signing signs the later ones and waits out every delay: a park
	// would cost a session read and the file's hash again.
	sign, signing *api.Client
	started       bool            // a PUT has started
	drain         context.Context // ends when the pool drains: no new part starts
	puts          context.Context // the PUTs': ends when v1SendParts returns
	f             *os.File
	j             state.Job // as last committed, with the ETags so far
	par           int

	results  chan partResult
	queue    []int       // parts to start, lowest first
	later    []partRetry // failed parts, to queue again at their time
	tries    map[int]int // failed PUTs in a row, by part
	urls     map[int]signedPart
	prog     *partProgress
	inflight int
	stop     error // once set, no new part starts
}

// partRetry is a failed part and when to try it again.
type partRetry struct {
	n  int
	at time.Time
}

// requeueDue moves the retries due at now back into the queue.
func (s *partSender) requeueDue(now time.Time) {
	for i := 0; i < len(s.later); {
		if !s.later[i].at.After(now) {
			s.queue = append(s.queue, s.later[i].n)
			s.later = slices.Delete(s.later, i, i+1)
			continue
		}
		i++
	}
	slices.Sort(s.queue)
}

// startParts starts queued parts, lowest first, until ParallelParts are in
// flight; a drain or a signing error sets stop instead.
func (s *partSender) startParts(now time.Time) {
	for s.stop == nil && s.inflight < s.par && len(s.queue) > 0 {
		if s.drain.Err() != nil {
			if errors.Is(context.Cause(s.drain), errDrained) {
				s.stop = errDrained
			} else {
				s.stop = s.ctx.Err()
			}
			return
		}
		n := s.queue[0]
		u, ok := s.urls[n]
		if !ok || !u.usable(now) {
			c := s.signing
			if !s.started {
				c = s.sign
			}
			if err := s.p.v1Sign(s.ctx, c, s.j, s.queue, s.urls); err != nil {
				s.stop = err
				return
			}
			u = s.urls[n]
		}
		s.queue = s.queue[1:]
		delete(s.urls, n)
		s.inflight++
		s.started = true
		s.put(n, u)
	}
}

// put starts part n's PUT; its result comes back on results.
func (s *partSender) put(n int, u signedPart) {
	off, size := partRange(s.j.UploadSize(), s.j.V1.PartSize, n)
	ctx, client, f, prog, results := s.puts, s.p.o.Client, s.f, s.prog, s.results
	go func() {
		etag, err := client.PutPart(ctx, u.url.URL, io.NewSectionReader(f, off, size), size, func(sent int64) { prog.set(n, sent) })
		results <- partResult{n: n, etag: etag, err: err}
	}()
}

// retryTimer returns a timer that fires when the first retry is due, if a
// part could start then; else nil and a nil channel.
func (s *partSender) retryTimer(now time.Time) (*time.Timer, <-chan time.Time) {
	if s.stop != nil || s.inflight >= s.par || len(s.later) == 0 {
		return nil, nil
	}
	first := slices.MinFunc(s.later, func(a, b partRetry) int { return a.at.Compare(b.at) })
	timer := time.NewTimer(max(first.at.Sub(now), 0))
	return timer, timer.C
}

// finished takes in a PUT's result. Its error is the test hook's only: a
// simulated death.
func (s *partSender) finished(r partResult) error {
	if r.err != nil {
		s.failed(r)
		return nil
	}
	_, size := partRange(s.j.UploadSize(), s.j.V1.PartSize, r.n)
	s.prog.done(r.n, size)
	s.j.V1.ETags[r.n-1] = r.etag
	s.j.Attempts, s.j.LastError, s.j.LastStatus = 0, "", 0
	stored, err := s.p.commit(s.ctx, s.j, state.Signed)
	if err != nil {
		if s.stop == nil {
			s.stop = fmt.Errorf("commit job %d part %d: %w", s.j.ID, r.n, err)
		}
		return nil
	}
	s.j = stored
	return s.p.hook("v1:part", s.j)
}

// failed schedules a failed part again as the retry rule says, up to
// maxPartTries in a row, or stops the sending.
func (s *partSender) failed(r partResult) {
	s.prog.set(r.n, 0)
	if s.stop != nil {
		return // stopping already; this is likely its echo
	}
	s.tries[r.n]++
	d := s.p.policy.DecideAs(state.ProfilePart, s.ctx, r.err, s.tries[r.n], s.p.o.Now())
	if (d.Action == state.Retry || d.Action == state.Resign) && s.tries[r.n] < maxPartTries {
		s.p.log.Debug().Uint64("job", s.j.ID).Int("part", r.n).Int("try", s.tries[r.n]).Str("action", d.Action.String()).
			Float64("retry_in_s", d.Delay.Seconds()).Err(r.err).Msg("part failed; trying it again")
		s.later = append(s.later, partRetry{n: r.n, at: s.p.o.Now().Add(d.Delay)})
		return
	}
	s.stop = fmt.Errorf("part %d: %w", r.n, r.err)
}

// v1Sign signs URLs for the first parts of queue that have no usable one
// (queue[0] among them), up to signAhead·ParallelParts and the API's 100.
func (p *Pool) v1Sign(ctx context.Context, c *api.Client, j state.Job, queue []int, urls map[int]signedPart) error {
	now := p.o.Now()
	limit := min(api.MaxPartURLsPerCall, signAhead*p.o.ParallelParts)
	var batch []int
	for _, n := range queue {
		if u, ok := urls[n]; ok && u.usable(now) {
			continue
		}
		batch = append(batch, n)
		if len(batch) == limit {
			break
		}
	}
	err := signPartURLs(ctx, c, j.V1.ID, batch, urls, p.o.Now)
	switch state.HTTPStatus(err) {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", errV1Lost, err)
	case http.StatusConflict:
		return fmt.Errorf("%w: %w", errV1Conflict, err)
	}
	return err
}

// signPartURLs signs the URLs of session id's parts batch (one call) into
// urls, each stamped with when it was signed (signedPart.usable).
func signPartURLs(ctx context.Context, c *api.Client, id string, batch []int, urls map[int]signedPart, now func() time.Time) error {
	pu, err := c.PartURLs(ctx, id, batch)
	if err != nil {
		return err
	}
	at := now()
	for _, u := range pu.URLs {
		urls[u.PartNumber] = signedPart{url: u, at: at}
	}
	return nil
}

// partProgress adds up the bytes of a multipart upload's parts: those
// stored before and those in flight as they go, for Pool.Progress. Its
// cost per report is the parts in flight, not all the parts.
type partProgress struct {
	size     int64
	report   func(sent, size int64)
	mu       sync.Mutex
	base     int64
	inflight map[int]int64
}

func newPartProgress(p *Pool, j state.Job) *partProgress {
	report := func(sent, size int64) {
		p.setProgress(j.ID, &Progress{Path: j.Path, Sent: sent, Size: size})
	}
	pp := &partProgress{size: j.UploadSize(), report: report, inflight: make(map[int]int64)}
	for n, e := range j.V1.ETags {
		if e != "" {
			_, l := partRange(j.UploadSize(), j.V1.PartSize, n+1)
			pp.base += l
		}
	}
	pp.publish()
	return pp
}

// set records part n's bytes sent so far (0: the part starts over).
func (pp *partProgress) set(n int, sent int64) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.inflight[n] = sent
	pp.publishLocked()
}

// done moves part n's bytes from in flight to stored.
func (pp *partProgress) done(n int, size int64) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	delete(pp.inflight, n)
	pp.base += size
	pp.publishLocked()
}

func (pp *partProgress) publish() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.publishLocked()
}

func (pp *partProgress) publishLocked() {
	sent := pp.base
	for _, b := range pp.inflight {
		sent += b
	}
	pp.report(min(sent, pp.size), pp.size)
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
			p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Str("upload", s.ID).Ints("missing", missing).
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
		case err == nil && !fileSame(fi, j):
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
			p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Str("upload", j.V1.ID).Err(err).Msg("complete refused: reading the session")
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

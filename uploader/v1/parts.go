package v1

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
	"github.com/splatd/splatd/uploader/step"
)

// The v1 parts step: the session read again (syncParts), then the parts it
// lacks sent by one partSender, each ETag committed as its part completes.

// PartCount is N = ceil(size / partSize), at least 1.
func PartCount(size, partSize int64) int {
	return max(1, int((size+partSize-1)/partSize))
}

// PartRange is part n's offset and length: bytes [(n-1)·partSize,
// min(n·partSize, size)).
func PartRange(size, partSize int64, n int) (off, length int64) {
	off = int64(n-1) * partSize
	return off, max(0, min(partSize, size-off))
}

// errLost and errConflict are part-upload-urls answers (404, 409) that
// send the parts step back to reading the session.
var (
	errLost     = errors.New("upload session is gone")
	errConflict = errors.New("upload session is not accepting parts")
)

// syncParts applies the server's record of the session to j: its
// uploadedParts are the truth (a part known only locally is sent again; a
// part stored with another ETag than ours takes the server's). It returns
// the missing part numbers, ascending.
func syncParts(j *state.Job, s api.UploadSession) []int {
	v := j.V1
	if s.PartSize > 0 && s.PartSize != v.PartSize {
		v.PartSize, v.Parts, v.ETags = s.PartSize, PartCount(j.UploadSize(), s.PartSize), nil
	}
	if len(v.ETags) != v.Parts {
		v.ETags = make([]string, v.Parts)
	}
	server := make(map[int]string, len(s.UploadedParts))
	for _, up := range s.UploadedParts {
		if _, n := PartRange(j.UploadSize(), v.PartSize, up.PartNumber); up.PartNumber > v.Parts || (up.HasSize && up.Size != n) {
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

// parts: signed → uploaded. It reads the session, then sends the parts
// the server lacks, up to ParallelParts at a time, committing each ETag.
func (p *Protocol) parts(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	for rereads := 0; ; rereads++ {
		sent := j.V1.Stored()
		s, err := p.env.Client.Paced(t).GetUpload(ctx, j.V1.ID)
		if state.HTTPStatus(err) == http.StatusNotFound {
			why := "upload session is gone (404)"
			if sent > 0 {
				why = fmt.Sprintf("the server lost the upload session (404), with the %d of %d parts sent to it", sent, j.V1.Parts)
			}
			return p.lost(j, why)
		}
		if err != nil {
			return j, err
		}
		if next, over, err := p.ended(j, s, state.Uploaded); over {
			return next, err
		}
		missing := syncParts(&j, s)
		if sent > 0 && rereads == 0 {
			p.env.Log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("upload", s.ID).Int("parts", j.V1.Parts).
				Int("server_holds", j.V1.Parts-len(missing)).Int("sent_before", sent).
				Msg(fmt.Sprintf("job %d's upload session holds %d of %d parts on the server: sending the %d missing", j.ID, j.V1.Parts-len(missing), j.V1.Parts, len(missing)))
		}
		// A peer's session is watched even once every part is stored: the
		// peer completes it, and completing it here too would only spend
		// the account's budget on a replay (a fleet drew 429s that way).
		if !j.V1.Owned {
			if next, wait := p.watchPeer(j, s); wait {
				return next, nil
			}
		}
		if len(missing) == 0 {
			return p.env.Move(j, state.Uploaded, "")
		}
		next, err := p.send(ctx, t, j, missing)
		switch {
		case errors.Is(err, errLost):
			return p.lost(next, "upload session is gone (404 at part-upload-urls)")
		case errors.Is(err, errConflict) && rereads < 2:
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

// sendParts runs the parts' PUTs, at most ParallelParts at a time, each
// streamed from the file by offset. URLs are signed just before use, a few
// at a time. A part that fails is tried again (re-signed first when storage
// refused its URL) as the retry rule decides, up to maxPartTries in a row;
// then, or on an error the rule does not retry, no new part starts, those
// in flight finish, and the error is returned with the job as last
// committed. Each ETag is committed as its part completes, by this
// goroutine alone, so commits never race.
func (p *Protocol) sendParts(ctx context.Context, t *pace.Caller, j state.Job, f *os.File, missing []int) (state.Job, error) {
	dctx, stopDrain := p.env.Pool.UntilDrain(ctx)
	defer stopDrain()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s := &partSender{
		p:       p,
		ctx:     ctx,
		sign:    p.env.Client.Paced(t),
		signing: p.env.Client.Paced(p.env.Client.Pacer().Caller(j.ID, 0)),
		drain:   dctx,
		puts:    pctx,
		f:       f,
		j:       j,
		par:     p.parallel,
		results: make(chan partResult, p.parallel), // never blocks a PUT, even after a crash return
		queue:   slices.Clone(missing),
		tries:   make(map[int]int),
		urls:    make(map[int]signedPart),
		prog:    newPartProgress(p, j),
	}
	defer p.env.Pool.EndReport(j.ID)
	done := ctx.Done()

	for {
		now := p.env.Now()
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

// partSender is the state of one sendParts call. Only the goroutine that
// runs sendParts touches it; the PUTs report through results.
type partSender struct {
	p   *Protocol
	ctx context.Context // the step's: signing, commits, the retry rule
	// sign signs the first URLs, before any PUT: a long delay parks the
	// job. signing signs the later ones and waits out every delay: a park
	// would cost a session read and the file's hash again.
	sign, signing *api.Client
	started       bool            // a PUT has started
	drain         context.Context // ends when the pool drains: no new part starts
	puts          context.Context // the PUTs': ends when sendParts returns
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
			if errors.Is(context.Cause(s.drain), step.ErrDrained) {
				s.stop = step.ErrDrained
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
			if err := s.p.signBatch(s.ctx, c, s.j, s.queue, s.urls); err != nil {
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
	off, size := PartRange(s.j.UploadSize(), s.j.V1.PartSize, n)
	ctx, client, f, prog, results := s.puts, s.p.env.Client, s.f, s.prog, s.results
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
	_, size := PartRange(s.j.UploadSize(), s.j.V1.PartSize, r.n)
	s.prog.done(r.n, size)
	s.j.V1.ETags[r.n-1] = r.etag
	s.j.Attempts, s.j.LastError, s.j.LastStatus = 0, "", 0
	stored, err := s.p.env.Pool.Commit(s.ctx, s.j, state.Signed)
	if err != nil {
		if s.stop == nil {
			s.stop = fmt.Errorf("commit job %d part %d: %w", s.j.ID, r.n, err)
		}
		return nil
	}
	s.j = stored
	return s.p.env.Pool.Hook("v1:part", s.j)
}

// failed schedules a failed part again as the retry rule says, up to
// maxPartTries in a row, or stops the sending.
func (s *partSender) failed(r partResult) {
	s.prog.set(r.n, 0)
	if s.stop != nil {
		return // stopping already; this is likely its echo
	}
	s.tries[r.n]++
	d := s.p.env.Policy.DecideAs(state.ProfilePart, s.ctx, r.err, s.tries[r.n], s.p.env.Now())
	if (d.Action == state.Retry || d.Action == state.Resign) && s.tries[r.n] < maxPartTries {
		s.p.env.Log.Debug().Uint64("job", s.j.ID).Int("part", r.n).Int("try", s.tries[r.n]).Str("action", d.Action.String()).
			Float64("retry_in_s", d.Delay.Seconds()).Err(r.err).Msg("part failed; trying it again")
		s.later = append(s.later, partRetry{n: r.n, at: s.p.env.Now().Add(d.Delay)})
		return
	}
	s.stop = fmt.Errorf("part %d: %w", r.n, r.err)
}

// signBatch signs URLs for the first parts of queue that have no usable one
// (queue[0] among them), up to signAhead·ParallelParts and the API's 100.
func (p *Protocol) signBatch(ctx context.Context, c *api.Client, j state.Job, queue []int, urls map[int]signedPart) error {
	now := p.env.Now()
	limit := min(api.MaxPartURLsPerCall, signAhead*p.parallel)
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
	err := signPartURLs(ctx, c, j.V1.ID, batch, urls, p.env.Now)
	switch state.HTTPStatus(err) {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", errLost, err)
	case http.StatusConflict:
		return fmt.Errorf("%w: %w", errConflict, err)
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

func newPartProgress(p *Protocol, j state.Job) *partProgress {
	report := func(sent, size int64) { p.env.Pool.Report(j, sent, size) }
	pp := &partProgress{size: j.UploadSize(), report: report, inflight: make(map[int]int64)}
	for n, e := range j.V1.ETags {
		if e != "" {
			_, l := PartRange(j.UploadSize(), j.V1.PartSize, n+1)
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

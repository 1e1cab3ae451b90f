package uploader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// The one-shot under v1 (docs/api-v1.md) takes the daemon's steps without
// a job store: create an upload session, send its parts ParallelParts at a
// time, complete, poll. Each call is one step of the one-shot patience
// (Retry), each part a step of its own, so a server that keeps failing ends
// the command instead of holding it for ever. Nothing is kept: the
// Idempotency-Key is new for every run and for every session the run
// creates again after its session went away (a repeated create within the
// run finds its session again; a second run, `publish -force` say, makes a
// new splat), and a session a run leaves unfinished expires on the server.

// oneShotKey is the Idempotency-Key of one run's session.
func oneShotKey() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "splatd-oneshot-" + hex.EncodeToString(b[:]), nil
}

// publishV1 is PublishFile under the v1 protocol. A complete refused with
// 400, 409 or 404 makes it read the session again, as the daemon's jobs do
// (maxResyncs times at most): a session gone or canceled is created again
// under a new key and every part sent again; a live one is sent the parts
// it does not list, and completed again. A part URL refused with 404 or 409
// (the session gone or canceled under the parts) starts a new session too.
func (o *OneShotOptions) publishV1(ctx context.Context, c *api.Client, path string, params state.PublishParams) (Published, error) {
	src, err := openSource(ctx, path, true)
	if err != nil {
		return Published{}, err
	}
	defer src.close()
	o.serialise() // the parts report from several goroutines
	var s api.UploadSession
	var have map[int]string // parts the session holds: number → ETag
	var comp api.Completion
	for resyncs := 0; ; resyncs++ {
		if s.ID == "" {
			if s, err = o.createV1(ctx, c, src, params); err != nil {
				return Published{}, err
			}
			have = nil
		}
		o.Stage("upload", "")
		parts, err := o.sendParts(ctx, c, src, s, have)
		if code := state.HTTPStatus(err); resyncs < maxResyncs && (code == http.StatusNotFound || code == http.StatusConflict) {
			o.Stage("resync", fmt.Sprintf("the upload session is gone or canceled (%v): creating a new one", err))
			s.ID = ""
			continue
		}
		if err != nil {
			return Published{}, err
		}
		o.Stage("publish", "")
		err = o.Retry(ctx, func() error {
			var err error
			comp, _, err = c.CompleteUpload(ctx, s.ID, parts) // a lost answer: the same complete again (200)
			return err
		})
		var ae *api.APIError
		if err == nil || resyncs >= maxResyncs || !errors.As(err, &ae) || ae.FromStorage() ||
			(ae.Status != http.StatusBadRequest && ae.Status != http.StatusConflict && ae.Status != http.StatusNotFound) {
			if err != nil {
				return Published{}, err
			}
			break
		}
		o.Stage("resync", fmt.Sprintf("complete refused (%v): reading the session", err))
		if have, err = o.readV1Session(ctx, c, src, &s); err != nil {
			return Published{}, err
		}
		if s.SplatID != "" { // completed after all, and the server named the splat
			comp.SplatID = s.SplatID
			break
		}
	}
	return o.poll(ctx, Published{ID: comp.SplatID}, api.OutcomePending, func() (Published, api.Outcome, error) {
		sp, err := c.SplatV1(ctx, comp.SplatID)
		return Published{ID: comp.SplatID, URL: sp.ViewerURL, Status: string(sp.Status)}, sp.Outcome(), err
	})
}

// createV1 creates the run's upload session for src under a new key.
func (o *OneShotOptions) createV1(ctx context.Context, c *api.Client, src *source, params state.PublishParams) (api.UploadSession, error) {
	key, err := oneShotKey()
	if err != nil {
		return api.UploadSession{}, err
	}
	o.Stage("create", "")
	var s api.UploadSession
	err = o.Retry(ctx, func() error {
		var err error
		s, _, err = c.CreateUpload(ctx, key, api.CreateUploadRequest{
			SourceFormat: src.format, ContentLength: src.size, Title: params.Title, Description: params.Description,
		})
		return err
	})
	return s, err
}

// readV1Session reads session s again after a refused complete. A session
// gone (404) or canceled clears s.ID (a new one is to be created); a live
// one returns the parts it holds of the right size, which need not be sent
// again. A session completed without naming its splat is an error: the
// splat exists and only the server knows which it is.
func (o *OneShotOptions) readV1Session(ctx context.Context, c *api.Client, src *source, s *api.UploadSession) (map[int]string, error) {
	var got api.UploadSession
	err := o.Retry(ctx, func() error {
		var err error
		got, err = c.GetUpload(ctx, s.ID)
		return err
	})
	switch {
	case state.HTTPStatus(err) == http.StatusNotFound || err == nil && got.Status == api.UploadCanceled:
		s.ID = ""
		return nil, nil
	case err != nil:
		return nil, err
	case got.SplatID != "":
		s.SplatID = got.SplatID
		return nil, nil
	case got.Status == api.UploadProcessing || got.Status == api.UploadCompleted:
		return nil, fmt.Errorf("upload session %s is %s but the server names no splat: it may be published; not sending it again", s.ID, got.Status)
	}
	have := map[int]string{}
	for _, p := range got.UploadedParts {
		if p.PartNumber > partCount(src.size, s.PartSize) {
			continue
		}
		if _, length := partRange(src.size, s.PartSize, p.PartNumber); !p.HasSize || p.Size == length {
			have[p.PartNumber] = p.ETag
		}
	}
	return have, nil
}

// serialise makes o's Stage and Progress safe to call from several
// goroutines: the caller's (a progress bar) need not be.
func (o *OneShotOptions) serialise() {
	var mu sync.Mutex
	stage, progress := o.Stage, o.Progress
	o.Stage = func(step, detail string) {
		mu.Lock()
		defer mu.Unlock()
		stage(step, detail)
	}
	if progress != nil {
		o.Progress = func(sent, size int64) {
			mu.Lock()
			defer mu.Unlock()
			progress(sent, size)
		}
	}
}

// oneShotParts is the state of one run's part uploads.
type oneShotParts struct {
	o        *OneShotOptions
	c        *api.Client
	src      *source
	id       string
	partSize int64
	parts    int
	batch    int // part URLs signed per call

	signMu sync.Mutex // one signing call at a time
	urls   map[int]signedPart
	next   int // the lowest part never signed

	prog *partProgress // nil: no progress asked for
}

// sendParts sends every part of src into session s but those it already
// holds (have), ParallelParts at a time, lowest first, and returns them all
// with their ETags. The first part
// that fails for good ends the others.
func (o *OneShotOptions) sendParts(ctx context.Context, c *api.Client, src *source, s api.UploadSession, have map[int]string) ([]api.CompletedPart, error) {
	r := &oneShotParts{
		o: o, c: c, src: src, id: s.ID, partSize: s.PartSize, parts: partCount(src.size, s.PartSize),
		batch: min(api.MaxPartURLsPerCall, signAhead*o.ParallelParts),
		urls:  make(map[int]signedPart), next: 1,
	}
	if o.Progress != nil {
		r.prog = &partProgress{size: src.size, report: o.Progress, inflight: make(map[int]int64)}
	}
	done := make([]api.CompletedPart, r.parts)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.ParallelParts)
	for n := 1; n <= r.parts; n++ {
		if etag, ok := have[n]; ok {
			done[n-1] = api.CompletedPart{PartNumber: n, ETag: etag}
			if r.prog != nil {
				_, length := partRange(src.size, s.PartSize, n)
				r.prog.done(n, length)
			}
			continue
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err // another part failed for good
			}
			etag, err := r.send(gctx, n)
			if err != nil {
				return fmt.Errorf("part %d: %w", n, err)
			}
			done[n-1] = api.CompletedPart{PartNumber: n, ETag: etag}
			if r.prog != nil {
				_, length := partRange(src.size, s.PartSize, n)
				r.prog.done(n, length)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return done, nil
}

// send PUTs part n, signing its URL again when storage refused it.
func (r *oneShotParts) send(ctx context.Context, n int) (string, error) {
	off, length := partRange(r.src.size, r.partSize, n)
	var etag string
	resign := false
	err := r.o.Retry(ctx, func() error {
		u, err := r.url(ctx, n, resign)
		if err != nil {
			return err
		}
		etag, err = r.c.PutPart(ctx, u, io.NewSectionReader(r.src.f, off, length), length, func(sent int64) { r.progress(n, sent) })
		if err != nil {
			r.progress(n, 0)
			resign = r.o.Policy.Decide(ctx, err, 1, r.o.Now()).Action == state.Resign
		}
		return err
	})
	return etag, err
}

// url returns part n's URL: one signed before and still fresh, unless
// fresh asks for a new one; else it signs n and the next parts never
// signed, up to batch of them.
func (r *oneShotParts) url(ctx context.Context, n int, fresh bool) (string, error) {
	r.signMu.Lock()
	defer r.signMu.Unlock()
	if u, ok := r.urls[n]; ok && !fresh && u.usable(r.o.Now()) {
		delete(r.urls, n)
		return u.url.URL, nil
	}
	batch := []int{n}
	for m := max(r.next, n+1); m <= r.parts && len(batch) < r.batch; m++ {
		batch = append(batch, m)
	}
	if err := signPartURLs(ctx, r.c, r.id, batch, r.urls, r.o.Now); err != nil {
		return "", err
	}
	r.next = max(r.next, batch[len(batch)-1]+1)
	u, ok := r.urls[n]
	if !ok {
		return "", &api.ProtocolError{Route: api.RouteV1PartURLs, Reason: fmt.Sprintf("no URL for part %d", n)}
	}
	delete(r.urls, n)
	return u.url.URL, nil
}

// progress records part n's bytes sent so far (0: it starts over).
func (r *oneShotParts) progress(n int, sent int64) {
	if r.prog != nil {
		r.prog.set(n, sent)
	}
}

package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splatd/splatd/state"
)

// Put streams body (exactly size bytes) to the signed URL with Content-Length
// and Content-Type binary/octet-stream, without the bearer token and unpaced.
// There is no overall deadline: it aborts when body yields no byte for the
// client's Timeout, or when the response headers take longer than that after
// the last byte. progress (may be nil) gets the cumulative bytes sent and is
// never called after Put returns.
func (c *Client) Put(ctx context.Context, signedURL string, body io.Reader, size int64, progress func(sent int64)) error {
	start := c.now()
	if _, err := c.storagePut(ctx, RouteStoragePut, signedURL, body, size, progress, "binary/octet-stream"); err != nil {
		return err
	}
	c.obs.UploadDone(c.now().Sub(start))
	return nil
}

// storagePut is the streaming PUT behind Put and PutPart: validation of
// the URL, no bearer, no redirects, the no-progress watchdog, and the signed
// query scrubbed from every error. contentType "" sends no Content-Type (an
// S3 UploadPart URL may not have signed one). It returns the 2xx response's
// headers.
func (c *Client) storagePut(ctx context.Context, route, signedURL string, body io.Reader, size int64, progress func(sent int64), contentType string) (http.Header, error) {
	u, err := parseSignedURL(route, signedURL)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("%s: negative size %d", route, size)
	}
	secrets := c.secrets(state.URLSecrets(u))

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.limiter != nil {
		// Inside the watchdog's context: a stalled PUT aborted by it also
		// stops waiting for its bandwidth. The wrapper hides the body's
		// type, so ContentLength is set explicitly below.
		body = c.limiter.Wrap(ctx, body)
	}
	pr := &putReader{r: body, obs: c.obs, progress: progress}
	pr.last.Store(c.now().UnixNano())
	req, err := c.putRequest(ctx, u, pr, size, contentType)
	if err != nil {
		return nil, fmt.Errorf("%s: building request: %s", route, state.ScrubText(err.Error(), secrets...))
	}

	stop := putWatchdog(c.timeout, size, pr, c.now, func() { cancel(errPutStalled) })
	defer stop()
	defer pr.finish()

	start := c.now()
	resp, err := c.storage.Load().Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errPutStalled) {
			err = fmt.Errorf("%w after %d of %d bytes (%w)", errPutStalled, pr.count(), size, err)
		}
		c.obs.APIRequest(route, 0, c.now().Sub(start))
		err = wrapNetErr(route, err, secrets)
		c.log.Debug().Str("route", route).Str("url", state.RedactURL(signedURL)).Err(err).Msg("storage PUT failed")
		return nil, err
	}
	defer resp.Body.Close()
	err = c.checkResponse(route, resp, secrets)
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	d := c.now().Sub(start)
	c.obs.APIRequest(route, resp.StatusCode, d)
	if err != nil {
		return nil, err
	}
	c.log.Debug().Str("route", route).Str("url", state.RedactURL(signedURL)).Int64("bytes", size).Float64("took_s", d.Seconds()).Msg("storage PUT done")
	return resp.Header, nil
}

// putRequest is the PUT of size bytes of body to u, with contentType ("":
// none) and no Authorization header, even when storage shares the API's
// host.
func (c *Client) putRequest(ctx context.Context, u *url.URL, body io.Reader, size int64, contentType string) (*http.Request, error) {
	if size == 0 {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("User-Agent", c.userAgent)
	return req, nil
}

// parseSignedURL parses an absolute https signed URL (http only for a
// loopback host).
func parseSignedURL(route, signedURL string) (*url.URL, error) {
	u, err := url.Parse(signedURL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf("%s: invalid signed URL %s", route, state.RedactURL(signedURL))
	}
	if !strings.EqualFold(u.Scheme, "https") && !(strings.EqualFold(u.Scheme, "http") && isLoopback(u.Hostname())) {
		// Plain http is tolerated only on this machine (a local MinIO, a
		// test server): anywhere else it would expose the file in transit.
		return nil, fmt.Errorf("%s: signed URL scheme %q is not allowed: only https is accepted (http only for loopback hosts)", route, u.Scheme)
	}
	return u, nil
}

// putReader counts the bytes the transport takes from the body, feeds
// progress and UploadBytes, and stamps the time of the last progress for the
// watchdog. The transport may still read after Do returns (it closes the body
// asynchronously); finish makes sure no callback runs after Put returns.
type putReader struct {
	r        io.Reader
	obs      Observer
	progress func(int64)
	last     atomic.Int64 // UnixNano of the last Read that returned data

	mu   sync.Mutex
	sent int64
	done bool
}

func (p *putReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.last.Store(time.Now().UnixNano())
		p.mu.Lock()
		if !p.done {
			p.sent += int64(n)
			p.obs.UploadBytes(int64(n))
			if p.progress != nil {
				p.progress(p.sent)
			}
		}
		p.mu.Unlock()
	}
	return n, err
}

func (p *putReader) count() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

func (p *putReader) finish() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
}

// putWatchdog calls abort when the body has made no progress for idle
// while it is still being sent. Once all size bytes are out, the transport's
// ResponseHeaderTimeout takes over. It re-arms itself instead of resetting a
// timer on every Read, which keeps the hot path to one atomic store.
func putWatchdog(idle time.Duration, size int64, pr *putReader, now func() time.Time, abort func()) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	var check func()
	check = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || pr.count() >= size {
			return
		}
		quiet := now().Sub(time.Unix(0, pr.last.Load()))
		if quiet >= idle {
			abort()
			return
		}
		t = time.AfterFunc(idle-quiet, check)
	}
	mu.Lock()
	t = time.AfterFunc(idle, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

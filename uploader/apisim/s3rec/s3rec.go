// Package s3rec is a loopback recording proxy in front of a real S3 server,
// for the S3 test lane (`make test-s3`): it shows what reached storage (the
// headers of every presigned PUT, S3's status, error code and ETag) and can
// stall PUTs, so that a test can kill a client at a known point.
//
// The simulator is pointed at the proxy instead of the S3 server, so its
// presigned URLs name the proxy's host (which SigV4 signs; the proxy keeps
// the Host header). Requests are forwarded unchanged, body streamed.
package s3rec

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// EnvVar names the S3 endpoint of the lane, in apisim.ParseS3URL's form
// (s3://KEY:SECRET@HOST:PORT/BUCKET). Tests skip without it.
const EnvVar = "SPLATD_TEST_S3"

// Config returns the lane's S3 endpoint, or skips the test when EnvVar is
// unset (so that `make test` needs no S3 server).
func Config(tb testing.TB) apisim.S3 {
	tb.Helper()
	raw := os.Getenv(EnvVar)
	if raw == "" {
		tb.Skipf("%s is not set: no S3 server (make test-s3 starts one)", EnvVar)
	}
	c, err := apisim.ParseS3URL(raw)
	if err != nil {
		tb.Fatalf("%s: %v", EnvVar, err)
	}
	return c
}

// Request is one request the proxy forwarded (or dropped while stalled).
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header // as received from the client
	// Presigned: the signature is in the query (X-Amz-Signature), so the
	// request came from a holder of a signed URL, not from the simulator's
	// own S3 client.
	Presigned  bool
	PartNumber int    // UploadPart: the partNumber query parameter
	UploadID   string // UploadPart, ListParts, Complete: the uploadId
	Status     int    // S3's answer; 0 when dropped before forwarding
	ETag       string // S3's ETag header, exactly as sent
	Code       string // S3's XML error Code of a non-2xx answer
	Message    string // and its Message
	Err        string // the proxy's error when S3 gave no answer
	// Complete holds the parts of a CompleteMultipartUpload body, in the
	// order sent, ETags exactly as sent.
	Complete []CompletedPart
}

// CompletedPart is one Part of a CompleteMultipartUpload body.
type CompletedPart struct {
	PartNumber int    `xml:"PartNumber"`
	ETag       string `xml:"ETag"`
}

// Proxy is a running recording proxy.
type Proxy struct {
	target apisim.S3
	srv    *http.Server
	ln     net.Listener
	rp     *httputil.ReverseProxy

	mu        sync.Mutex
	reqs      []Request
	stallLeft int           // presigned PUTs to pass before stalling; <0: no stall
	release   chan struct{} // closed by Release and DropStalled
	drop      bool          // set with the close by DropStalled
	stalled   int
}

// Start runs a proxy to target on a free loopback port; it stops when the
// test ends.
func Start(tb testing.TB, target apisim.S3) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	scheme := "http"
	if target.Secure {
		scheme = "https"
	}
	p := &Proxy{target: target, ln: ln, stallLeft: -1, release: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{
		// Only the destination changes: the Host header stays the
		// proxy's, which is what the URLs were signed for.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = scheme, target.Endpoint
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: p.record,
		ErrorHandler:   p.failed,
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go p.srv.Serve(ln)
	tb.Cleanup(func() {
		p.Release()
		p.srv.Close()
	})
	return p
}

// S3 is the target's configuration with the proxy as the endpoint: give
// it to the simulator (apisim.Options.S3).
func (p *Proxy) S3() apisim.S3 {
	c := p.target
	c.Endpoint = p.ln.Addr().String()
	c.Secure = false
	c.Transport = nil
	return c
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := Request{
		Method: r.Method, Path: r.URL.Path, Query: q, Header: r.Header.Clone(),
		Presigned: q.Has("X-Amz-Signature"), UploadID: q.Get("uploadId"),
	}
	req.PartNumber, _ = strconv.Atoi(q.Get("partNumber"))
	if req.Presigned && r.Method == http.MethodPut && !p.pass(r) {
		req.Err = "stalled, then dropped"
		p.add(req) // never forwarded
		panic(http.ErrAbortHandler)
	}
	if r.Method == http.MethodPost && q.Has("uploadId") {
		// CompleteMultipartUpload: small, read whole to record the ETags.
		b, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		var doc struct {
			Parts []CompletedPart `xml:"Part"`
		}
		if xml.Unmarshal(b, &doc) == nil {
			req.Complete = doc.Parts
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	p.mu.Lock()
	p.reqs = append(p.reqs, Request{}) // a slot in arrival order
	idx := len(p.reqs) - 1
	p.mu.Unlock()
	ctx := context.WithValue(r.Context(), slotKey{}, &pending{idx: idx, req: req})
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// pending is a forwarded request waiting for S3's answer.
type pending struct {
	idx int
	req Request
}

type slotKey struct{}

// pass counts a presigned PUT against the stall, waiting while stalled. It
// reports false if the client gave up meanwhile (nothing is forwarded).
func (p *Proxy) pass(r *http.Request) bool {
	p.mu.Lock()
	if p.stallLeft != 0 {
		if p.stallLeft > 0 {
			p.stallLeft--
		}
		p.mu.Unlock()
		return true
	}
	p.stalled++
	rel := p.release
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.stalled--
		p.mu.Unlock()
	}()
	select {
	case <-rel:
		p.mu.Lock()
		drop := p.drop
		p.mu.Unlock()
		return !drop && r.Context().Err() == nil
	case <-r.Context().Done():
		return false
	}
}

// StallAfter lets the next n presigned PUTs through and stalls every later
// one, unforwarded, until Release or DropStalled. A stalled PUT whose client is
// seen gone is dropped. Dropped PUTs are recorded with Status 0.
func (p *Proxy) StallAfter(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallLeft = n
}

// Stalled is the number of presigned PUTs waiting now.
func (p *Proxy) Stalled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// Release ends the stall: waiting PUTs go on and later ones pass.
func (p *Proxy) Release() { p.end(false) }

// DropStalled ends the stall, dropping the waiting PUTs (never forwarded, the
// connection cut): what a client killed meanwhile would have sent never
// reaches S3, even if its whole body sits in a socket buffer. Later PUTs
// pass.
func (p *Proxy) DropStalled() { p.end(true) }

func (p *Proxy) end(drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stallLeft == 0 {
		p.drop = drop
		close(p.release)
		p.release = make(chan struct{})
	}
	p.stallLeft = -1
}

// Requests returns every request so far, in arrival order (a request
// still in flight shows with Status 0 and no Method).
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, 0, len(p.reqs))
	for _, r := range p.reqs {
		if r.Method != "" {
			out = append(out, r)
		}
	}
	return out
}

// PresignedPUTs returns the PUTs made with signed URLs (the client's).
func (p *Proxy) PresignedPUTs() []Request {
	var out []Request
	for _, r := range p.Requests() {
		if r.Presigned && r.Method == http.MethodPut {
			out = append(out, r)
		}
	}
	return out
}

// record runs on S3's answer: it notes status, ETag and error code.
func (p *Proxy) record(resp *http.Response) error {
	pd, ok := resp.Request.Context().Value(slotKey{}).(*pending)
	if !ok {
		return nil
	}
	pd.req.Status = resp.StatusCode
	pd.req.ETag = resp.Header.Get("ETag")
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		var e struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		if xml.Unmarshal(b, &e) == nil {
			pd.req.Code, pd.req.Message = e.Code, e.Message
		}
	}
	p.fill(pd)
	return nil
}

// failed records a request S3 never answered (Status stays 0).
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error) {
	if pd, ok := r.Context().Value(slotKey{}).(*pending); ok {
		pd.req.Err = err.Error()
		p.fill(pd)
	}
	// As S3 does when it answers before reading a body and closes (the
	// client may see a reset instead of the answer): no answer at all,
	// rather than a 502 that S3 never sent.
	panic(http.ErrAbortHandler)
}

func (p *Proxy) fill(pd *pending) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs[pd.idx] = pd.req
}

func (p *Proxy) add(req Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
}

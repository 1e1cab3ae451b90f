package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/state"

	"github.com/splatd/splatd/uploader/pace"
)

// Client limits and defaults.
const (
	// DefaultTimeout bounds one API call (and a storage PUT's wait for
	// response headers and its longest pause) when ClientOptions.Timeout is 0.
	DefaultTimeout = 60 * time.Second

	errorBodyLimit    = 64 << 10 // error bodies are read this far, no further
	responseBodyLimit = 4 << 20  // a 2xx JSON body larger than this is refused
	drainLimit        = 64 << 10 // drained after use so the connection is reused
	maxRedirects      = 5
	idleConnsPerHost  = 16 // enough for every worker plus polling
)

// ClientOptions configures a Client.
type ClientOptions struct {
	BaseURL string // must be https
	Token   string // bearer token; only ever sent to BaseURL's origin
	// TokenSource, when set, replaces Token: the token is read from it for
	// every request, so a reloaded token file takes effect at once.
	TokenSource *Token
	RootCAs     *x509.CertPool // nil = system roots (cmd adds api.ca_file to the system pool)
	Timeout     time.Duration  // per API call; the storage PUT uses it as an idle/progress timeout instead
	UserAgent   string
	Pacer       *pace.Pacer // shared by every client of the token; nil = one of its own, without state (its waits go to Observer)
	Observer    Observer    // metrics hooks; nil = no-op
	Logger      zerolog.Logger
	// Limiter, when set, limits the aggregate rate of every storage PUT
	// body (legacy Put and v1 PutPart) of this client and of every other
	// client sharing it; nil = no limit.
	Limiter *Limiter

	// ClientVersion is the version sent as uploadClient.version in v1 upload
	// sessions; "" takes it from a "splatd/<version>" UserAgent, else "dev".
	// It is cut to 64 characters, the API's limit.
	ClientVersion string
}

// Pacer admits the client's API requests within the token's rate limits:
// *pace.Pacer, or a job's *pace.Caller of it (Client.Paced).
type Pacer interface {
	Wait(ctx context.Context, route string, read bool) (release func(*pace.Answer), err error)
}

var (
	_ Pacer = (*pace.Pacer)(nil)
	_ Pacer = (*pace.Caller)(nil)
)

// readRoutes are the routes that only read (GET): the pacer does not delay
// their first request on a spent class without a known read route.
var readRoutes = map[string]bool{
	RouteGetSplat: true, RouteCheckpoints: true,
	RouteV1Me: true, RouteV1Splats: true, RouteV1GetSplat: true, RouteV1GetUpload: true,
}

// Client is the concrete client of the splat publishing API. It is safe for
// concurrent use. Each method makes one attempt; retrying is the caller's
// decision (see the package doc).
type Client struct {
	baseURL   *url.URL // scheme, host and path prefix; no query
	tokens    *Token   // read for every request: the prober may reload it
	userAgent string
	clientVer string // uploadClient.version of v1 sessions: 1..64 characters
	timeout   time.Duration
	api       *atomic.Pointer[http.Client] // API calls: bearer header, same-origin redirects only
	storage   *atomic.Pointer[http.Client] // signed-URL PUTs: no bearer, no redirects, no overall timeout
	reach     *reachability                // whether the API answers (health.go)
	pacer     *pace.Pacer                  // the token's
	wait      Pacer                        // what this view's requests wait on: pacer, or a Caller of it
	limiter   *Limiter                     // nil: storage PUTs are not limited
	obs       Observer
	log       zerolog.Logger
	now       func() time.Time
}

// NewClient checks o and builds a Client. Only https base URLs are accepted:
// the bearer token must never cross the network in clear.
func NewClient(o ClientOptions) (*Client, error) {
	u, err := parseBaseURL(o.BaseURL)
	if err != nil {
		return nil, err
	}
	tokens := o.TokenSource
	if tokens == nil {
		tokens = StaticToken(o.Token)
	}
	if strings.ContainsAny(tokens.Value(), "\r\n\x00") {
		return nil, errors.New("uploader: API token contains a control character")
	}

	c := &Client{
		baseURL:   u,
		tokens:    tokens,
		userAgent: o.UserAgent,
		timeout:   o.Timeout,
		api:       new(atomic.Pointer[http.Client]),
		storage:   new(atomic.Pointer[http.Client]),
		reach:     new(reachability),
		pacer:     o.Pacer,
		limiter:   o.Limiter,
		obs:       o.Observer,
		log:       o.Logger.With().Str("component", "client").Logger(),
		now:       time.Now,
	}
	if c.userAgent == "" {
		c.userAgent = "splatd"
	}
	c.clientVer = clientVersion(o.ClientVersion, c.userAgent)
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.obs == nil {
		c.obs = NopObserver{}
	}
	if c.pacer == nil {
		c.pacer = pace.New(pace.Options{Logger: c.log, Waited: c.obs.RateLimitWait})
	}
	c.wait = c.pacer

	c.SetRootCAs(o.RootCAs)
	return c, nil
}

// Pacer returns the token's pacer, which every view of c shares.
func (c *Client) Pacer() *pace.Pacer { return c.pacer }

// Paced returns a view of c whose API requests wait on w (a job's
// pace.Caller); the views share everything else.
func (c *Client) Paced(w Pacer) *Client {
	v := *c
	v.wait = w
	return &v
}

// SetRootCAs makes the API and storage connections verify servers against
// roots (nil: the system's) from now on: a reloaded api.ca_file. Requests
// in flight finish on their connections; idle ones are closed.
func (c *Client) SetRootCAs(roots *x509.CertPool) {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	oldAPI := c.api.Swap(&http.Client{Transport: apiTransport(dialer, roots), CheckRedirect: c.checkAPIRedirect})
	oldStorage := c.storage.Swap(&http.Client{
		Transport: storageTransport(dialer, roots, c.timeout),
		// A streamed body cannot be replayed, and a redirect could lead the
		// upload anywhere: hand any 3xx back as an APIError.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	})
	for _, h := range []*http.Client{oldAPI, oldStorage} {
		if h != nil {
			h.CloseIdleConnections()
		}
	}
}

// parseBaseURL checks the API base URL and returns it normalised: https,
// no trailing slash.
func parseBaseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("uploader: API base URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("uploader: API base URL %q is not a URL", state.RedactURL(raw))
	}
	if !strings.EqualFold(u.Scheme, "https") {
		return nil, fmt.Errorf("uploader: API base URL scheme %q is not allowed: only https is accepted", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("uploader: API base URL %q has no host", state.RedactURL(raw))
	}
	if u.User != nil {
		return nil, errors.New("uploader: API base URL must not carry credentials; use the token")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("uploader: API base URL must not have a query or fragment")
	}
	u.Scheme = "https"
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// apiTransport is the API calls' transport: HTTP/2 when the server offers it.
func apiTransport(dialer *net.Dialer, roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   idleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// storageTransport is the storage PUTs' own transport: HTTP/1.1 (one TCP
// stream per upload, like S3 clients; Go's HTTP/2 flow control caps upload
// throughput), a larger write buffer for fewer TLS records, and a
// response-header timeout instead of an overall one, because the body may
// take hours.
func storageTransport(dialer *net.Dialer, roots *x509.CertPool, timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   idleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		WriteBufferSize:       128 << 10,
	}
}

// checkAPIRedirect follows a redirect only within the API's origin (scheme,
// host and port): Go drops Authorization on a cross-host redirect but would
// still send the request, and a downgrade or another port is not our API.
// A refused redirect comes back to checkResponse as the 3xx itself.
func (c *Client) checkAPIRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects || !c.sameOrigin(req.URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// sameOrigin reports whether u has the base URL's scheme, host and port.
func (c *Client) sameOrigin(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, c.baseURL.Scheme) &&
		strings.EqualFold(u.Hostname(), c.baseURL.Hostname()) &&
		originPort(u) == originPort(c.baseURL)
}

func originPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "http") {
		return "80"
	}
	return "443"
}

// newRequest builds an API request. path is already escaped and starts with
// "/"; body, when not nil, is sent as JSON. The bearer header is added here
// and only for the API's origin.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	s := c.baseURL.String() + path
	if len(query) > 0 {
		s += "?" + query.Encode()
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("uploader: encoding request: %w", err)
		}
		r = bytes.NewReader(b) // NewRequest sets GetBody, so a same-origin 307 can replay it
	}
	req, err := http.NewRequestWithContext(ctx, method, s, r)
	if err != nil {
		return nil, fmt.Errorf("uploader: building request: %s", state.ScrubText(err.Error(), c.currentToken()))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if tok := c.currentToken(); tok != "" && c.sameOrigin(req.URL) {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// do paces, sends and checks one API exchange and decodes a 2xx JSON body
// into v (when not nil). The pacer's wait is outside the per-call timeout: a
// request delayed for a rate-limit window has not started yet.
func (c *Client) do(ctx context.Context, route string, req *http.Request, v any) error {
	_, _, err := c.send(ctx, route, req, v)
	return err
}

// send is do for the calls whose answer's status and headers mean something
// (v1's 201 vs 200, Location): it also returns them, status 0 when no
// response came.
func (c *Client) send(ctx context.Context, route string, req *http.Request, v any) (int, http.Header, error) {
	release, err := c.wait.Wait(ctx, route, readRoutes[route])
	if err != nil {
		return 0, nil, fmt.Errorf("%s: waiting for rate limit: %w", route, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req = req.WithContext(ctx)

	start := c.now()
	resp, err := c.api.Load().Do(req)
	if err != nil {
		release(nil)
		c.obs.APIRequest(route, 0, c.now().Sub(start))
		err = wrapNetErr(route, err, c.secrets(nil))
		c.log.Debug().Str("route", route).Err(err).Msg("API request failed")
		if ctx.Err() == nil || errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			c.reach.failed(c.now(), err)
		}
		return 0, nil, err
	}
	a := rateAnswer(resp, c.now())
	release(a) // the headers are all the pacer needs; free the slot now
	if a.Limit > 0 && a.Remaining >= 0 {
		c.obs.RateLimit(pace.ClassName(a.Limit), a.Remaining)
	}
	defer resp.Body.Close()

	err = c.checkResponse(route, resp, nil)
	if resp.StatusCode >= 500 {
		c.reach.failed(c.now(), err)
	} else {
		c.reach.answered()
	}
	if err == nil && v != nil {
		err = c.decode(route, resp.Body, v)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	d := c.now().Sub(start)
	c.obs.APIRequest(route, resp.StatusCode, d)
	c.log.Debug().Str("route", route).Int("status", resp.StatusCode).Float64("took_s", d.Seconds()).Msg("API request")
	return resp.StatusCode, resp.Header, err
}

// decode reads a JSON body of at most responseBodyLimit bytes.
func (c *Client) decode(route string, body io.Reader, v any) error {
	lr := &io.LimitedReader{R: body, N: responseBodyLimit + 1}
	err := json.NewDecoder(lr).Decode(v)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case lr.N <= 0:
		return &ProtocolError{Route: route, Reason: "response body exceeds " + strconv.Itoa(responseBodyLimit) + " bytes"}
	case errors.Is(err, io.EOF):
		return &ProtocolError{Route: route, Reason: "empty response body"}
	case errors.As(err, &se), errors.As(err, &te):
		return &ProtocolError{Route: route, Reason: "response is not the expected JSON", Err: err}
	}
	return wrapNetErr(route, err, c.secrets(nil))
}

// checkResponse turns a non-2xx response into *APIError, reading at most
// errorBodyLimit bytes of its body. extra lists secrets (a signed URL's
// query) to scrub from the server's message, which may echo the request.
func (c *Client) checkResponse(route string, resp *http.Response, extra []string) error {
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	e := &APIError{Route: route, Status: resp.StatusCode}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		loc := resp.Header.Get("Location")
		if loc == "" {
			e.Message = "redirect without a Location"
		} else {
			e.Message = "redirect to " + state.RedactURL(loc) + " not followed (only same-origin redirects are)"
		}
	} else {
		e.Message = errorMessage(body, resp.StatusCode)
	}
	e.Message = state.ScrubText(e.Message, c.secrets(extra)...)
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		e.Reset = parseReset(resp.Header)
		e.RetryAfter = parseRetryAfter(resp.Header, c.now())
	case http.StatusServiceUnavailable:
		e.RetryAfter = parseRetryAfter(resp.Header, c.now())
	}
	return e
}

// secrets lists what must never appear in an error text: the token and extra.
func (c *Client) secrets(extra []string) []string {
	tok := c.currentToken()
	if tok == "" {
		return extra
	}
	return append([]string{tok}, extra...)
}

// SignedURL asks for a signed upload URL for fileName (a name with its
// extension, e.g. "scan.ply"). The key comes back under storageKey or s3Key;
// Upload.KeyField remembers which so Publish can echo it. A response with
// neither, or without a URL, is a *ProtocolError.
func (c *Client) SignedURL(ctx context.Context, fileName string) (Upload, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/api/upload/signed-url", nil, map[string]string{"fileName": fileName})
	if err != nil {
		return Upload{}, err
	}
	var w wireSigned
	if err := c.do(ctx, RouteSignedURL, req, &w); err != nil {
		return Upload{}, err
	}
	up := Upload{URL: strings.TrimSpace(string(w.SignedURL)), IssuedAt: c.now()}
	switch {
	case w.StorageKey != nil && *w.StorageKey != "":
		up.Key, up.KeyField = string(*w.StorageKey), KeyFieldStorageKey
	case w.S3Key != nil && *w.S3Key != "":
		up.Key, up.KeyField = string(*w.S3Key), KeyFieldS3Key
	default:
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "no storageKey or s3Key"}
	}
	if up.URL == "" {
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "no signedUrl"}
	}
	if u, err := url.Parse(up.URL); err != nil || !u.IsAbs() || u.Host == "" {
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "signedUrl is not an absolute URL"}
	}
	return up, nil
}

// Publish starts processing of an uploaded file. The key is sent under the
// field name it arrived with. If the server answers 2xx without a splat id,
// Publish returns the decoded record together with a *ProtocolError: the
// splat probably exists, so a caller must not simply publish again.
func (c *Client) Publish(ctx context.Context, r PublishRequest) (Splat, error) {
	field := r.KeyField
	if field == "" {
		field = KeyFieldStorageKey
	}
	if field != KeyFieldStorageKey && field != KeyFieldS3Key {
		return Splat{}, fmt.Errorf("%s: unknown key field %q (want %s or %s)", RoutePublish, field, KeyFieldStorageKey, KeyFieldS3Key)
	}
	if r.Key == "" {
		return Splat{}, fmt.Errorf("%s: empty storage key", RoutePublish)
	}
	body := map[string]any{
		field:         r.Key,
		"title":       r.Title,
		"description": r.Description,
		"listed":      r.Listed,
	}
	if r.Format != "" {
		body["format"] = r.Format
	}
	if r.Settings != nil {
		body["settings"] = r.Settings
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/api/splats/publish", nil, body)
	if err != nil {
		return Splat{}, err
	}
	var w wireSplat
	if err := c.do(ctx, RoutePublish, req, &w); err != nil {
		return Splat{}, err
	}
	s := w.splat()
	if s.ID == "" {
		return s, &ProtocolError{Route: RoutePublish, Reason: "no splat id in the publish response (the splat may exist)"}
	}
	return s, nil
}

// Splat fetches a splat record, to poll its processing task.
func (c *Client) Splat(ctx context.Context, id string) (Splat, error) {
	if strings.TrimSpace(id) == "" {
		return Splat{}, fmt.Errorf("%s: empty splat id", RouteGetSplat)
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/splats/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return Splat{}, err
	}
	var w wireSplat
	if err := c.do(ctx, RouteGetSplat, req, &w); err != nil {
		return Splat{}, err
	}
	return w.splat(), nil
}

// Checkpoints lists one page of branch's checkpoints, newest first. limit 0
// leaves the server's default; skip is the id of the last checkpoint of the
// previous page ("" for the first page).
func (c *Client) Checkpoints(ctx context.Context, branch string, limit int, skip string) (CheckpointPage, error) {
	if strings.TrimSpace(branch) == "" {
		return CheckpointPage{}, fmt.Errorf("%s: empty branch id", RouteCheckpoints)
	}
	if limit < 0 {
		return CheckpointPage{}, fmt.Errorf("%s: negative limit %d", RouteCheckpoints, limit)
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if skip != "" {
		q.Set("skip", skip)
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/branches/"+url.PathEscape(branch)+"/checkpoints", q, nil)
	if err != nil {
		return CheckpointPage{}, err
	}
	var w wireCheckpointPage
	if err := c.do(ctx, RouteCheckpoints, req, &w); err != nil {
		return CheckpointPage{}, err
	}
	page := CheckpointPage{Checkpoints: make([]Checkpoint, 0, len(w.Result)), HasMore: bool(w.Pagination.HasMore)}
	for i, raw := range w.Result {
		var wc wireCheckpoint
		if err := json.Unmarshal(raw, &wc); err != nil {
			return CheckpointPage{}, &ProtocolError{Route: RouteCheckpoints, Reason: "checkpoint " + strconv.Itoa(i) + " is not an object", Err: err}
		}
		page.Checkpoints = append(page.Checkpoints, wc.checkpoint())
	}
	return page, nil
}

// Limiter returns the bandwidth limiter of the client's storage PUTs (nil
// when none was given), for a reload and a status page.
func (c *Client) Limiter() *Limiter { return c.limiter }

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
	u, err := url.Parse(signedURL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf("%s: invalid signed URL %s", route, state.RedactURL(signedURL))
	}
	if !strings.EqualFold(u.Scheme, "https") && !(strings.EqualFold(u.Scheme, "http") && isLoopback(u.Hostname())) {
		// Plain http is tolerated only on this machine (a local MinIO, a
		// test server): anywhere else it would expose the file in transit.
		return nil, fmt.Errorf("%s: signed URL scheme %q is not allowed: only https is accepted (http only for loopback hosts)", route, u.Scheme)
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
	var rb io.Reader = pr
	if size == 0 {
		rb = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), rb)
	if err != nil {
		return nil, fmt.Errorf("%s: building request: %s", route, state.ScrubText(err.Error(), secrets...))
	}
	req.ContentLength = size
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("User-Agent", c.userAgent)
	// Deliberately no Authorization header, even when storage shares the
	// API's host.

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

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Client) currentToken() string { return c.tokens.Value() }

// Token is the client's token source (the prober reloads it).
func (c *Client) Token() *Token { return c.tokens }

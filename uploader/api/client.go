package api

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// Limiter returns the bandwidth limiter of the client's storage PUTs (nil
// when none was given), for a reload and a status page.
func (c *Client) Limiter() *Limiter { return c.limiter }

func (c *Client) currentToken() string { return c.tokens.Value() }

// Token is the client's token source (the prober reloads it).
func (c *Client) Token() *Token { return c.tokens }

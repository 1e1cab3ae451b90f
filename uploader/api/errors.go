package api

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/splatd/splatd/state"
)

// APIError is every non-2xx answer, from the API or from object storage.
// Callers classify it with errors.As; state's retry policy reads it through
// HTTPStatus and FromStorage.
type APIError struct {
	Route   string // one of the Route* constants
	Status  int    // HTTP status code
	Message string // the server's `error` text, else a short body excerpt, else the status text
	// Reset is the server's X-RateLimit-Reset (by the server's clock) on a
	// 429, zero otherwise. The pacer has already translated it to local time
	// and holds the class; callers only need it for messages.
	Reset time.Time
	// RetryAfter is the server's Retry-After on a 429 or 503, zero if absent.
	RetryAfter time.Duration
}

// Error reads like `publish: HTTP 400: storage limit exceeded`.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Route, e.Status, msg)
}

// HTTPStatus returns the status code; it lets the state package classify
// errors without importing net/http or this package.
func (e *APIError) HTTPStatus() int { return e.Status }

// RetryWait is how long the server asked the caller to wait, measured from
// now: its Retry-After, or on a 429 the time left until the window resets
// (state.Policy lengthens a backoff to it, never shortens one).
func (e *APIError) RetryWait(now time.Time) time.Duration {
	d := e.RetryAfter
	if e.Status == http.StatusTooManyRequests && !e.Reset.IsZero() {
		d = max(d, e.Reset.Sub(now))
	}
	return max(d, 0)
}

// FromStorage reports whether the answer came from object storage (the
// signed-URL PUT or a v1 part PUT), where a 403 means "URL expired or
// refused: sign again" rather than "forbidden".
func (e *APIError) FromStorage() bool { return e.Route == RouteStoragePut || e.Route == RouteV1PartPut }

// ProtocolError is a 2xx answer the client cannot use: not JSON, or missing
// a field the next step needs (a signed-URL response with neither storageKey
// nor s3Key, a publish response without an id). Retrying rarely helps; for
// publish it also means the splat may exist already.
type ProtocolError struct {
	Route  string
	Reason string
	Err    error // underlying decode error, if any
}

// Error reads like `signed_url: unusable response: no storageKey or s3Key`.
func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: unusable response: %s: %v", e.Route, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: unusable response: %s", e.Route, e.Reason)
}

// Unwrap returns the underlying decode error.
func (e *ProtocolError) Unwrap() error { return e.Err }

// Unrepeatable reports whether the call may have taken effect although its
// 2xx answer could not be read, so that repeating it could do it twice: a
// legacy publish (each call makes a splat). A v1 complete is idempotent.
// The retry rule (state.Policy) holds such a call.
func (e *ProtocolError) Unrepeatable() bool { return e.Route == RoutePublish }

// RequestError is a request the client refused to send because the API would
// refuse it (a field outside the contract's limits, an enum value it does not
// name). Nothing was sent; sending the same request again cannot succeed, so
// it reports Invalid, which state classifies as permanent.
type RequestError struct {
	Route  string
	Reason string
}

// Error reads like `v1_create_upload: request not sent: unknown sourceFormat "obj"`.
func (e *RequestError) Error() string {
	return e.Route + ": request not sent: " + e.Reason
}

// Invalid reports true: the request, not the moment, is at fault.
func (e *RequestError) Invalid() bool { return true }

// netError is a transport failure (no HTTP answer). Its text has been
// scrubbed of signed-URL queries and the token; Unwrap still reaches the
// original error (with *url.Error's URL scrubbed in place) so errors.Is
// (context.Canceled, os.ErrDeadlineExceeded) and errors.As work.
type netError struct {
	route string
	text  string
	err   error
}

func (e *netError) Error() string { return e.route + ": " + e.text }
func (e *netError) Unwrap() error { return e.err }

// FromStorage reports a failure to reach object storage, whose host a
// signed URL names (the API's choice, not the config's).
func (e *netError) FromStorage() bool { return e.route == RouteStoragePut || e.route == RouteV1PartPut }

// errPutStalled is the cause given when a storage PUT made no progress
// for the idle timeout.
var errPutStalled = errors.New("storage upload stalled: no bytes sent within the idle timeout")

// errorMessage extracts the human part of an error body: the JSON
// `error` field (or `message`, or `error.message`), S3's XML Code/Message,
// else a one-line excerpt, else the status text.
func errorMessage(body []byte, status int) string {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var o struct {
			Error   json.RawMessage `json:"error"`
			Message jsonText        `json:"message"`
		}
		if json.Unmarshal(body, &o) == nil {
			var s jsonText
			if len(o.Error) > 0 && o.Error[0] == '{' {
				var inner struct {
					Message jsonText `json:"message"`
				}
				_ = json.Unmarshal(o.Error, &inner)
				s = inner.Message
			} else if len(o.Error) > 0 {
				_ = s.UnmarshalJSON(o.Error)
			}
			if m := oneLine(string(s)); m != "" {
				return m
			}
			if m := oneLine(string(o.Message)); m != "" {
				return m
			}
		}
	}
	if len(body) > 0 && body[0] == '<' {
		var x struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		if xml.Unmarshal(body, &x) == nil && (x.Code != "" || x.Message != "") {
			switch {
			case x.Code == "":
				return oneLine(x.Message)
			case x.Message == "":
				return oneLine(x.Code)
			}
			return oneLine(x.Code + ": " + x.Message)
		}
	}
	if m := oneLine(string(body)); m != "" && utf8.ValidString(m) {
		return excerpt(m, 200)
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "HTTP " + strconv.Itoa(status)
}

// oneLine collapses whitespace so a message fits one log line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// excerpt cuts s to at most n runes, marking the cut.
func excerpt(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// wrapNetErr wraps a transport error for route: *url.Error's URL is
// scrubbed in place (so errors.As callers see the scrubbed URL too) and the
// text is scrubbed of secrets.
func wrapNetErr(route string, err error, secrets []string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = state.RedactURL(ue.URL)
	}
	return &netError{route: route, text: state.ScrubText(netCause(err), secrets...), err: err}
}

// netCause says what failed in a transport error, in one readable line:
// the host and the cause, not the request's method and URL.
func netCause(err error) string {
	ue, ok := err.(*url.Error)
	if !ok {
		return err.Error() // already worded (a stalled PUT)
	}
	host := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		host = u.Host
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var dns *net.DNSError
	cause := ue.Err.Error()
	switch {
	case errors.As(err, &ua):
		cause = "its TLS certificate is signed by an unknown authority (api.ca_file)"
	case errors.As(err, &hn), errors.As(err, &ci):
		cause = "its TLS certificate does not verify: " + ue.Err.Error()
	case errors.As(err, &dns):
		cause = "the host name does not resolve (" + dns.Err + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		cause = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		cause = "connection reset"
	case ue.Timeout():
		cause = "no answer in time (" + ue.Err.Error() + ")"
	}
	return "cannot reach " + host + ": " + cause
}

package pace

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// headers is what an answer says about the rate limit.
type headers struct {
	limit        int
	remaining    int
	hasRemaining bool
	resetRaw     int64         // the server's epoch seconds, 0 if absent
	resetIn      time.Duration // Reset minus the server's now (Date), or minus local now
	dateLag      time.Duration // local now minus Date
	hasDate      bool
	hasReset     bool
	retryAfter   time.Duration
}

func parseHeaders(h http.Header, now time.Time) headers {
	var r headers
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Limit"))); err == nil && v > 0 {
		r.limit = v
	}
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining"))); err == nil {
		r.remaining, r.hasRemaining = max(v, 0), true
	}
	if reset := ParseReset(h); !reset.IsZero() {
		ref := now
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			ref, r.dateLag, r.hasDate = d, now.Sub(d), true
		}
		r.resetRaw, r.resetIn, r.hasReset = reset.Unix(), reset.Sub(ref), true
	}
	r.retryAfter = ParseRetryAfter(h, now)
	return r
}

// ParseReset parses X-RateLimit-Reset (UTC epoch seconds, or milliseconds);
// zero if absent or malformed.
func ParseReset(h http.Header) time.Time {
	n, err := strconv.ParseFloat(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 64)
	switch {
	case err != nil || n <= 0:
		return time.Time{}
	case n > 1e11: // some servers send milliseconds
		return time.UnixMilli(int64(n)).UTC()
	}
	return time.Unix(int64(n), 0).UTC()
}

// ParseRetryAfter parses Retry-After as delay-seconds or an HTTP-date. A date
// is measured against the answer's Date when present (both the server's
// clock, so skew cancels), else against now.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(max(n, 0) * float64(time.Second))
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		now = d
	}
	return max(t.Sub(now), 0)
}

package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/uploader/pace"
)

// rateAnswer reads what resp says of the rate limit, for the pacer; nil
// when no response came.
func rateAnswer(resp *http.Response, now time.Time) *pace.Answer {
	if resp == nil {
		return nil
	}
	h := resp.Header
	a := &pace.Answer{Status: resp.StatusCode, Remaining: -1, Reset: parseReset(h), RetryAfter: parseRetryAfter(h, now)}
	a.Limit, _ = strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Limit")))
	if n, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining"))); err == nil {
		a.Remaining = max(n, 0)
	}
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		a.Date = d
	}
	return a
}

// parseReset parses X-RateLimit-Reset (UTC epoch seconds, or milliseconds);
// zero if absent or malformed.
func parseReset(h http.Header) time.Time {
	n, err := strconv.ParseFloat(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 64)
	switch {
	case err != nil || n <= 0:
		return time.Time{}
	case n > 1e11: // some servers send milliseconds
		return time.UnixMilli(int64(n)).UTC()
	}
	return time.Unix(int64(n), 0).UTC()
}

// parseRetryAfter parses Retry-After as delay-seconds or an HTTP-date. A date
// is measured against the answer's Date when present (both the server's
// clock, so skew cancels), else against now.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
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

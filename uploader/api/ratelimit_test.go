package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/splatd/splatd/uploader/pace"
)

// TestRateAnswerReadsTheHeaders: what the pacer learns from a response is
// read from its headers here, the same way the 429 error reads Reset and
// Retry-After.
func TestRateAnswerReadsTheHeaders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	server := now.Add(-3 * time.Second) // the server's clock is 3 s behind ours
	date := server.Format(http.TimeFormat)
	cases := []struct {
		name string
		h    http.Header
		want pace.Answer
	}{
		{"a window", http.Header{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {" 7 "}, "X-Ratelimit-Reset": {"1795867260"}, "Date": {date}},
			pace.Answer{Status: 200, Limit: 10, Remaining: 7, Reset: time.Unix(1795867260, 0).UTC(), Date: server}},
		{"reset in milliseconds", http.Header{"X-Ratelimit-Reset": {"1795867260500"}},
			pace.Answer{Status: 200, Remaining: -1, Reset: time.UnixMilli(1795867260500).UTC()}},
		{"no headers", http.Header{},
			pace.Answer{Status: 200, Remaining: -1}},
		{"malformed", http.Header{"X-Ratelimit-Limit": {"ten"}, "X-Ratelimit-Remaining": {"many"}, "X-Ratelimit-Reset": {"soon"}, "Date": {"today"}},
			pace.Answer{Status: 200, Remaining: -1}},
		{"a negative remaining is none left", http.Header{"X-Ratelimit-Limit": {"5"}, "X-Ratelimit-Remaining": {"-2"}},
			pace.Answer{Status: 200, Limit: 5}},
		{"retry-after in seconds", http.Header{"Retry-After": {"30"}},
			pace.Answer{Status: 200, Remaining: -1, RetryAfter: 30 * time.Second}},
		// Both the date and Date are the server's clock: the skew cancels.
		{"retry-after as an HTTP date", http.Header{"Retry-After": {server.Add(40 * time.Second).Format(http.TimeFormat)}, "Date": {date}},
			pace.Answer{Status: 200, Remaining: -1, Date: server, RetryAfter: 40 * time.Second}},
		{"retry-after as an HTTP date without Date", http.Header{"Retry-After": {now.Add(40 * time.Second).Format(http.TimeFormat)}},
			pace.Answer{Status: 200, Remaining: -1, RetryAfter: 40 * time.Second}},
		{"retry-after in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}},
			pace.Answer{Status: 200, Remaining: -1}},
	}
	for _, tc := range cases {
		got := rateAnswer(&http.Response{StatusCode: 200, Header: tc.h}, now)
		if *got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, *got, tc.want)
		}
	}
	if rateAnswer(nil, now) != nil {
		t.Error("no response must be no answer (nil)")
	}
}

package bench

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestRequestLogWindows: requests are grouped into windows as the
// simulator's limiter opens them, a 429 is told apart, and a gap shows in
// the next window's start.
func TestRequestLogWindows(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := &requestLog{
		times:  []time.Time{at(0.3), at(0.4), at(9.9), at(10.0), at(10.1), at(10.2), at(31.5)},
		status: []int{201, 201, 201, 201, 201, http.StatusTooManyRequests, 201},
	}
	// 0.3 opens [0, 10); 10.0 opens [10, 20); 31.5 opens [31, 41).
	want := []string{"3@0", "2+1×429@10", "1@31"}
	if got := l.windows(10 * time.Second); !slices.Equal(got, want) {
		t.Errorf("windows = %v, want %v", got, want)
	}
}

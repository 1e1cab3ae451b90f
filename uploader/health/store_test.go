package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// TestStorePatience: the store patience's attempt number. A full disk
// whose commits alternate (one fits in bbolt's free pages, the next does
// not) keeps it growing across the recoveries; a store that then works for
// the patience's cap starts over at the first wait; a claim answered ends
// an episode of failed claims only.
func TestStorePatience(t *testing.T) {
	t.Parallel()
	e := newTestEnv(patience(state.ProfileStore, time.Millisecond, 8*time.Millisecond))
	var recoveries int
	s := NewStore(e.Env, func() { recoveries++ })
	ctx := context.Background()
	write, read := errors.New("no space left on device"), errors.New("input/output error")
	steps := []struct {
		do        string // "write", "read": a failure; "claim", "commit": a success; "cap": the clock moves by the cap
		wantWait  time.Duration
		wantError bool // Err set after the step
		wantRec   int
	}{
		{do: "write", wantWait: time.Millisecond, wantError: true},
		{do: "claim", wantError: true}, // a claim answered is no recovery of a write
		{do: "commit", wantRec: 1},
		{do: "write", wantWait: 2 * time.Millisecond, wantError: true, wantRec: 1}, // a false recovery
		{do: "commit", wantRec: 2},
		{do: "write", wantWait: 4 * time.Millisecond, wantError: true, wantRec: 2},
		{do: "write", wantWait: 8 * time.Millisecond, wantError: true, wantRec: 2},
		{do: "write", wantWait: 8 * time.Millisecond, wantError: true, wantRec: 2}, // the cap
		{do: "commit", wantRec: 3},
		{do: "claim", wantRec: 3}, // nothing open: no second recovery
		{do: "cap", wantRec: 3},   // the store works for the cap
		{do: "read", wantWait: time.Millisecond, wantError: true, wantRec: 3},
		{do: "claim", wantRec: 4}, // the failed read works again
	}
	for i, st := range steps {
		before := e.log.count("job store failed")
		switch st.do {
		case "write":
			s.Failed(ctx, fmt.Errorf("commit: %w", write), true)
		case "read":
			s.Failed(ctx, fmt.Errorf("claim: %w", read), false)
		case "claim":
			s.Answered()
		case "commit":
			s.Advanced()
		case "cap":
			e.skew.Add(int64(8 * time.Millisecond))
		}
		lines := strings.Split(strings.TrimSpace(e.log.String()), "\n")
		if st.wantWait > 0 {
			if n := e.log.count("job store failed"); n != before+1 {
				t.Fatalf("step %d (%s): %d failure lines, want 1", i, st.do, n-before)
			}
			want := fmt.Sprintf(`"retry_in_s":%v`, st.wantWait.Seconds())
			if last := lines[len(lines)-1]; !strings.Contains(last, want) {
				t.Errorf("step %d (%s): %s; want %s", i, st.do, last, want)
			}
		}
		if got := s.Err() != nil; got != st.wantError {
			t.Errorf("step %d (%s): Err set %v, want %v", i, st.do, got, st.wantError)
		}
		if recoveries != st.wantRec {
			t.Errorf("step %d (%s): %d recoveries, want %d", i, st.do, recoveries, st.wantRec)
		}
	}
	if n := e.log.count("job store works again"); n != recoveries {
		t.Errorf("%d 'works again' lines for %d recoveries", n, recoveries)
	}
}

// TestStoreFailedEndsWithCtx: a wait for the store ends with its context,
// and says so.
func TestStoreFailedEndsWithCtx(t *testing.T) {
	t.Parallel()
	e := newTestEnv(patience(state.ProfileStore, time.Hour, time.Hour))
	s := NewStore(e.Env, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.Failed(ctx, errors.New("input/output error"), false) {
		t.Error("Failed = true after ctx ended")
	}
	if s.Err() == nil {
		t.Error("Err = nil after a failure")
	}
}

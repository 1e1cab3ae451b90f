package state

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestCanMove(t *testing.T) {
	t.Parallel()
	legal := map[[2]Stage]bool{}
	for from, tos := range transitions {
		for _, to := range tos {
			legal[[2]Stage{from, to}] = true
		}
	}
	// Spot checks that encode the safety rules, independent of the table.
	tests := []struct {
		from, to Stage
		want     bool
	}{
		{Queued, Ready, true},
		{Queued, Done, true}, // duplicate content
		{Ready, Signed, true},
		{Signed, Uploaded, true},
		{Signed, Ready, true}, // new signed URL
		{Uploaded, Publishing, true},
		{Uploaded, Ready, false},     // never re-signed after upload: a changed file goes back to queued
		{Publishing, Uploaded, true}, // 429: nothing created, a fresh intent later
		{Uploaded, Queued, true},
		{Publishing, Processing, true},
		{Publishing, Held, true},
		{Processing, Done, true},
		{Processing, Failed, true},
		{Failed, Queued, true},
		{Held, Uploaded, true},
		{Held, Publishing, false}, // through a fresh intent commit only
		{Failed, Publishing, false},
		{Processing, Processing, true},
		// Never publish twice or skip the intent commit.
		{Processing, Publishing, false},
		{Uploaded, Processing, false},
		{Publishing, Queued, false},
		{Processing, Queued, false},
		{Done, Queued, false},
		{Done, Publishing, false},
		{Queued, Signed, false},
		{Ready, Uploaded, false},
		{Signed, Publishing, false},
		{Queued, Held, false},
		{Stage("bogus"), Queued, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s→%s", tt.from, tt.to), func(t *testing.T) {
			if got := CanMove(tt.from, tt.to); got != tt.want {
				t.Errorf("CanMove(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
			if legal[[2]Stage{tt.from, tt.to}] != tt.want {
				t.Errorf("table and spot check disagree for %s→%s", tt.from, tt.to)
			}
		})
	}
	// Every stage has an entry and Done is terminal.
	for _, s := range Stages {
		if _, ok := transitions[s]; !ok {
			t.Errorf("stage %s missing from the table", s)
		}
		// A changed file is hashed again only while it cannot have been
		// published yet.
		if want := !s.Published() || s == Held; CanMove(s, Queued) != want {
			t.Errorf("CanMove(%s, queued) = %v, want %v", s, !want, want)
		}
	}
	for _, s := range Stages {
		if CanMove(Done, s) {
			t.Errorf("done must be terminal, but done→%s is allowed", s)
		}
	}
}

func TestMove(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	j := Job{ID: 7, Stage: Queued, Attempts: 3, StageSince: t0}
	t1 := t0.Add(time.Minute)
	if err := j.Move(Queued, t1); err != nil {
		t.Fatal(err)
	}
	if j.Attempts != 3 || !j.StageSince.Equal(t0) {
		t.Errorf("same-stage move reset bookkeeping: %+v", j)
	}
	if err := j.Move(Ready, t1); err != nil {
		t.Fatal(err)
	}
	if j.Attempts != 0 || !j.StageSince.Equal(t1) || j.Stage != Ready {
		t.Errorf("after move: %+v", j)
	}
	err := j.Move(Processing, t1)
	var te *TransitionError
	if !errors.As(err, &te) || te.From != Ready || te.To != Processing || te.ID != 7 {
		t.Fatalf("illegal move: got %v", err)
	}
	if j.Stage != Ready {
		t.Errorf("illegal move changed the stage to %s", j.Stage)
	}
}

func TestJobRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	j := Job{ID: 1, Path: "/a/b.ply", Stage: Processing, ModTime: now, PublishedAt: &now,
		Params: PublishParams{Title: "b", Format: "sog", Settings: map[string]any{"camera": map[string]any{"fov": 65.0}}},
		Upload: Upload{Key: "k", KeyField: "s3Key", IssuedAt: now}}
	b, err := j.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != JobVersion || got.Path != j.Path || got.Upload.KeyField != "s3Key" || !got.PublishedAt.Equal(now) ||
		got.Params.Settings["camera"].(map[string]any)["fov"] != 65.0 {
		t.Errorf("round trip: %+v", got)
	}
	if _, err := Unmarshal([]byte(`{"v":99,"id":3}`)); err == nil {
		t.Error("a newer schema version was accepted")
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	fixed := func(v float64) func() float64 { return func() float64 { return v } }
	b := Backoff{Base: 2 * time.Second, Cap: 5 * time.Minute, Jitter: NoJitter}
	tests := []struct {
		b       Backoff
		attempt int
		want    time.Duration
	}{
		{b, 0, 2 * time.Second},
		{b, 1, 2 * time.Second},
		{b, 2, 4 * time.Second},
		{b, 5, 32 * time.Second},
		{b, 9, 5 * time.Minute},
		{b, 1000, 5 * time.Minute}, // no overflow
		{Backoff{Base: 2 * time.Second, Cap: time.Minute, Jitter: FullJitter, Rand: fixed(0.5)}, 3, 4 * time.Second},
		{Backoff{Base: 2 * time.Second, Cap: time.Minute, Jitter: FullJitter, Rand: fixed(0)}, 3, 0},
		{Backoff{Base: 2 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: fixed(0)}, 3, 4 * time.Second},
		{Backoff{Base: 2 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: fixed(0.5)}, 3, 6 * time.Second},
		{Backoff{Base: 5 * time.Second, Cap: 60 * time.Second, Jitter: NoJitter}, 5, 60 * time.Second}, // poll
	}
	for i, tt := range tests {
		if got := tt.b.Delay(tt.attempt); got != tt.want {
			t.Errorf("%d: Delay(%d) = %v, want %v", i, tt.attempt, got, tt.want)
		}
	}
	// Real randomness stays within bounds.
	for i := 1; i < 20; i++ {
		d := DefaultBackoff.Delay(i)
		if d < time.Second || d > 5*time.Minute {
			t.Errorf("DefaultBackoff.Delay(%d) = %v out of bounds", i, d)
		}
	}
}

type fakeStatus struct {
	status  int
	storage bool
}

func (e fakeStatus) Error() string     { return fmt.Sprintf("HTTP %d", e.status) }
func (e fakeStatus) HTTPStatus() int   { return e.status }
func (e fakeStatus) FromStorage() bool { return e.storage }

type fakeInvalid struct{}

func (fakeInvalid) Error() string { return "not a ply" }
func (fakeInvalid) Invalid() bool { return true }

type fakeIncomplete struct{}

func (fakeIncomplete) Error() string    { return "short" }
func (fakeIncomplete) Incomplete() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("sign: %w", err) }
	tests := []struct {
		name   string
		err    error
		want   Class
		newURL bool
	}{
		{"network", errors.New("connection reset by peer"), Transient, false},
		{"timeout", context.DeadlineExceeded, Transient, false},
		{"canceled", wrap(context.Canceled), Canceled, false},
		{"500", fakeStatus{500, false}, Transient, false},
		{"503 storage", wrap(fakeStatus{503, true}), Transient, false},
		{"429", fakeStatus{429, false}, Transient, false},
		{"408", fakeStatus{408, false}, Transient, false},
		{"storage 403", wrap(fakeStatus{403, true}), Transient, true},
		{"storage 404", fakeStatus{404, true}, Transient, true},
		{"storage 400", fakeStatus{400, true}, Permanent, false},
		{"api 400", fakeStatus{400, false}, Permanent, false},
		{"api 403", wrap(fakeStatus{403, false}), Permanent, false},
		{"api 404", fakeStatus{404, false}, Permanent, false},
		{"api 401", wrap(fakeStatus{401, false}), Auth, false},
		{"invalid file", wrap(fakeInvalid{}), Permanent, false},
		{"incomplete", wrap(fakeIncomplete{}), Wait, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
			if got := NeedsNewURL(tt.err); got != tt.newURL {
				t.Errorf("NeedsNewURL(%v) = %v, want %v", tt.err, got, tt.newURL)
			}
		})
	}
	if HTTPStatus(wrap(fakeStatus{418, false})) != 418 || HTTPStatus(errors.New("x")) != 0 {
		t.Error("HTTPStatus")
	}
}

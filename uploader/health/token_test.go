package health

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// fakeAPI refuses the token for the first refuse probes, then accepts it;
// each probe is told to probed.
type fakeAPI struct {
	tokens *api.Token
	refuse int
	probed chan string // the call: "me" or "sign"
}

func (f *fakeAPI) Token() *api.Token                  { return f.tokens }
func (f *fakeAPI) Unreachable() (error, time.Time)    { return nil, time.Time{} }
func (f *fakeAPI) Me(context.Context) (api.Me, error) { return api.Me{}, f.answer("me") }
func (f *fakeAPI) SignedURL(context.Context, string) (api.Upload, error) {
	return api.Upload{}, f.answer("sign")
}

func (f *fakeAPI) answer(call string) error {
	f.probed <- call
	if f.refuse > 0 {
		f.refuse--
		return &api.APIError{Status: 401, Message: "unauthorized"}
	}
	return nil
}

func runToken(t *testing.T, e *testEnv, f *fakeAPI, v1 bool, probeAPI time.Duration) *Token {
	tk := NewToken(e.Env, f, v1, probeAPI, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
	return tk
}

// TestTokenResumesAfterAcceptedProbe: a paused pool is probed on the token
// patience until the API accepts the token, then resumes and wakes.
func TestTokenResumesAfterAcceptedProbe(t *testing.T) {
	t.Parallel()
	e := newTestEnv(patience(state.ProfileToken, time.Millisecond, time.Millisecond))
	f := &fakeAPI{tokens: api.StaticToken("t"), refuse: 2, probed: make(chan string, 10)}
	tk := NewToken(e.Env, f, false, 0, time.Hour)
	tk.Pause(&api.APIError{Status: 401})
	until := tk.Until()
	if until == nil {
		t.Fatal("Until = nil while paused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = tk.Run(ctx) }()
	<-e.woken
	<-until
	if err := tk.Err(); err != nil {
		t.Errorf("Err after the token was accepted = %v", err)
	}
	if n := len(f.probed); n != 3 {
		t.Errorf("%d probes, want 2 refused and 1 accepted", n)
	}
	for range len(f.probed) {
		if call := <-f.probed; call != "sign" {
			t.Errorf("the legacy protocol probed with %q, want sign", call)
		}
	}
	if n := e.log.count("API still refuses the token"); n != 2 {
		t.Errorf("%d 'still refuses' lines, want 2", n)
	}
}

// TestTokenProbeAtStartAndProbeNow: a token refused at start pauses the
// pool at once; ProbeNow probes again without waiting out the patience.
func TestTokenProbeAtStartAndProbeNow(t *testing.T) {
	t.Parallel()
	e := newTestEnv(patience(state.ProfileToken, time.Hour, time.Hour))
	f := &fakeAPI{tokens: api.StaticToken("t"), refuse: 1, probed: make(chan string, 10)}
	e.log.seen = make(chan string, 100)
	tk := runToken(t, e, f, true, time.Hour)
	if call := <-f.probed; call != "me" {
		t.Errorf("the v1 protocol probed with %q, want me", call)
	}
	for l := range e.log.seen {
		if strings.Contains(l, "all work is paused") {
			break
		}
	}
	if tk.Err() == nil || tk.Until() == nil {
		t.Fatal("a token refused at start did not pause")
	}
	until := tk.Until()
	tk.ProbeNow()
	<-f.probed
	<-until
	if err := tk.Err(); err != nil {
		t.Errorf("Err after ProbeNow's probe was accepted = %v", err)
	}
}

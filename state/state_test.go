package state

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
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
		{Done, Queued, true}, // splatd republish: a new publish, on purpose
		{Done, Publishing, false},
		{Done, Canceled, false},
		// Cancel before the publish call only; never a failure.
		{Queued, Canceled, true},
		{Signed, Canceled, true},
		{Uploaded, Canceled, true},
		{Held, Canceled, true},
		{Publishing, Canceled, false},
		{Processing, Canceled, false},
		{Failed, Canceled, false},
		{Canceled, Queued, true}, // splatd retry
		{Canceled, Failed, false},
		{Canceled, Publishing, false},
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
		// published yet; held and done go back only by an operator's
		// decision (retry, republish).
		if want := !s.Published() || s == Held || s == Done; CanMove(s, Queued) != want {
			t.Errorf("CanMove(%s, queued) = %v, want %v", s, !want, want)
		}
	}
	for _, s := range Stages {
		if CanMove(Done, s) != (s == Queued) {
			t.Errorf("done leaves only for queued (republish), but CanMove(done, %s) = %v", s, CanMove(Done, s))
		}
		if CanMove(Canceled, s) != (s == Queued) {
			t.Errorf("canceled leaves only for queued (retry), but CanMove(canceled, %s) = %v", s, CanMove(Canceled, s))
		}
		if s.Cancelable() != (!s.Published() && !s.Final() || s == Held) {
			t.Errorf("%s.Cancelable() = %v: only stages before the publish call, and held", s, s.Cancelable())
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
	j := Job{ID: 1, File: File{Path: "/a/b.ply", ModTime: now}, Stage: Processing, Splat: Splat{PublishedAt: &now},
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
	if got.V != 1 || got.Path != j.Path || got.Upload.KeyField != "s3Key" || !got.PublishedAt.Equal(now) ||
		got.Params.Settings["camera"].(map[string]any)["fov"] != 65.0 {
		t.Errorf("round trip: %+v", got)
	}
	// A job that uses a v1 field is written as version 2.
	j.Protocol, j.Generation = ProtocolV1, 1
	j.V1 = &Session{Attempt: 1, Key: "splatd-x-g1-s1", ID: "u", PartSize: 5, Parts: 2, ETags: []string{`"a"`, ""}}
	if b, err = j.Marshal(); err != nil {
		t.Fatal(err)
	}
	if got, err = Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if got.V != 2 || got.V1 == nil || got.V1.ETags[0] != `"a"` || got.V1.Stored() != 1 || got.Generation != 1 {
		t.Errorf("v1 round trip: %+v %+v", got, got.V1)
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

// storageNet and apiNet are network errors on the way to storage and to
// the API (api's netError).
type storageNet struct{ err error }

func (e storageNet) Error() string     { return "storage_put: " + e.err.Error() }
func (e storageNet) Unwrap() error     { return e.err }
func (e storageNet) FromStorage() bool { return true }

type apiNet struct{ err error }

func (e apiNet) Error() string     { return "signed_url: " + e.err.Error() }
func (e apiNet) Unwrap() error     { return e.err }
func (e apiNet) FromStorage() bool { return false }

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

type fakeWait struct {
	fakeStatus
	d time.Duration
}

func (f fakeWait) RetryWait(time.Time) time.Duration { return f.d }

type fakeIncompleteSince struct{ at time.Time }

func (fakeIncompleteSince) Error() string          { return "short by 12 bytes" }
func (fakeIncompleteSince) Incomplete() bool       { return true }
func (f fakeIncompleteSince) ChangedAt() time.Time { return f.at }

// TestPolicyDecide covers every class of error the rule knows, with the
// delay it gives. Rand 0.5 makes equal jitter exactly 3/4 of the step.
func TestPolicyDecide(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("sign: %w", err) }
	p := Policy{Settle: 2 * time.Second, Rand: func() float64 { return 0.5 }}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: EqualJitter})
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		attempt int
		want    Action
		delay   time.Duration
	}{
		{"network", live, errors.New("connection reset by peer"), 1, Retry, 3 * time.Second},
		{"network, third try", live, errors.New("connection reset by peer"), 3, Retry, 12 * time.Second},
		{"timeout below us", live, context.DeadlineExceeded, 1, Retry, 3 * time.Second},
		{"a cancel that is not ours", live, wrap(context.Canceled), 1, Retry, 3 * time.Second},
		{"our own cancel", ended, wrap(context.Canceled), 1, Stop, 0},
		{"our own deadline", ended, context.DeadlineExceeded, 1, Stop, 0},
		{"500", live, fakeStatus{500, false}, 1, Retry, 3 * time.Second},
		{"503 storage", live, wrap(fakeStatus{503, true}), 2, Retry, 6 * time.Second},
		{"408", live, fakeStatus{408, false}, 1, Retry, 3 * time.Second},
		{"429 waits for the server's word", live, fakeWait{fakeStatus{429, false}, 40 * time.Second}, 1, Retry, 40 * time.Second},
		{"Retry-After shorter than backoff", live, fakeWait{fakeStatus{503, false}, time.Second}, 1, Retry, 3 * time.Second},
		{"storage 403: sign again at once", live, wrap(fakeStatus{403, true}), 1, Resign, 0},
		{"storage 403 again: at once", live, fakeStatus{403, true}, 2, Resign, 0},
		{"storage 403 a third time: backoff", live, fakeStatus{403, true}, 3, Resign, 3 * time.Second},
		{"storage 401", live, fakeStatus{401, true}, 1, Resign, 0},
		{"storage 404", live, fakeStatus{404, true}, 1, Resign, 0},
		{"storage 400", live, fakeStatus{400, true}, 1, Fail, 0},
		{"api 400", live, fakeStatus{400, false}, 1, Fail, 0},
		{"api 403", live, wrap(fakeStatus{403, false}), 1, Fail, 0},
		{"api 404", live, fakeStatus{404, false}, 1, Fail, 0},
		{"api 409", live, fakeStatus{409, false}, 1, Fail, 0},
		{"api 413", live, fakeStatus{413, false}, 1, Fail, 0},
		{"api 401", live, wrap(fakeStatus{401, false}), 1, PauseToken, 0},
		{"invalid file", live, wrap(fakeInvalid{}), 1, Fail, 0},
		{"incomplete file", live, wrap(fakeIncomplete{}), 1, WaitFile, 1500 * time.Millisecond},
		{"incomplete file, later", live, wrap(fakeIncomplete{}), 3, WaitFile, 6 * time.Second},
		{"incomplete, changed a minute ago", live, wrap(fakeIncompleteSince{time.Unix(0, 0).Add(-time.Minute)}), 3, WaitFile, 6 * time.Second},
		{"incomplete for longer than the timeout", live, wrap(fakeIncompleteSince{time.Unix(0, 0).Add(-61 * time.Minute)}), 3, Fail, 0},
		{"tls: unknown authority", live, wrap(&url.Error{Op: "Post", URL: "https://x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}), 1, WaitConfig, 3750 * time.Millisecond},
		{"tls: bad certificate", live, x509.CertificateInvalidError{Reason: x509.Expired}, 2, WaitConfig, 3750 * time.Millisecond},
		{"tls: wrong host name", live, x509.HostnameError{Host: "x"}, 1, WaitConfig, 3750 * time.Millisecond},
		{"dns: no such host", live, wrap(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}}), 1, WaitConfig, 3750 * time.Millisecond},
		{"dns: temporary failure retries", live, &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}, 1, Retry, 3 * time.Second},
		{"refused, within the grace", live, wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), 8, Retry, 45 * time.Second},
		{"refused for longer than the grace", live, wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), 9, WaitConfig, 3750 * time.Millisecond},
		// A storage host is a signed URL's: sign again rather than pause
		// every worker; a TLS error there is still the config's (ca_file).
		{"storage refused for longer than the grace", live, storageNet{os.NewSyscallError("connect", syscall.ECONNREFUSED)}, 9, Resign, 45 * time.Second},
		{"storage host not found", live, storageNet{&net.DNSError{Err: "no such host", Name: "s3.gone", IsNotFound: true}}, 1, Resign, 3 * time.Second},
		{"storage tls", live, storageNet{x509.HostnameError{Host: "x"}}, 1, WaitConfig, 3750 * time.Millisecond},
		{"api host not found", live, apiNet{&net.DNSError{Err: "no such host", Name: "api.gone", IsNotFound: true}}, 1, WaitConfig, 3750 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := p.Decide(tt.ctx, tt.err, tt.attempt, time.Unix(0, 0))
			if got.Action != tt.want || got.Delay != tt.delay {
				t.Errorf("Decide(%v, attempt %d) = %v after %v, want %v after %v", tt.err, tt.attempt, got.Action, got.Delay, tt.want, tt.delay)
			}
		})
	}
	if HTTPStatus(wrap(fakeStatus{418, false})) != 418 || HTTPStatus(errors.New("x")) != 0 {
		t.Error("HTTPStatus")
	}
}

// TestPolicyDecideReasons checks the kinds and reasons that the worker shows
// operators (jobs, /readyz, the splatd_config_error gauge).
func TestPolicyDecideReasons(t *testing.T) {
	t.Parallel()
	p := Policy{}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: NoJitter})
	now := time.Unix(100000, 0)
	d := p.Decide(context.Background(), fmt.Errorf("check: %w", fakeIncompleteSince{now.Add(-2 * time.Hour)}), 40, now)
	if d.Action != Fail || d.Reason != "file still incomplete after 1h: check: short by 12 bytes" {
		t.Errorf("incomplete for 2h: %v %q", d.Action, d.Reason)
	}
	p.IncompleteTimeout = -1
	if d := p.Decide(context.Background(), fakeIncompleteSince{now.Add(-48 * time.Hour)}, 40, now); d.Action != WaitFile {
		t.Errorf("incomplete_timeout off: %v", d.Action)
	}
	if d := p.Decide(context.Background(), x509.UnknownAuthorityError{}, 1, now); d.Kind != ConfigTLS {
		t.Errorf("kind %q, want tls", d.Kind)
	}
	if d := p.Decide(context.Background(), errors.New("connection reset by peer"), 50, now); d.Kind != "" || d.Action != Retry {
		t.Errorf("a reset is transient however often: %v %q", d.Action, d.Kind)
	}
	for in, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 5 * time.Minute: "5m", 45 * time.Second: "45s", 1500 * time.Millisecond: "1.5s"} {
		if got := ShortDuration(in); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestPolicyProfiles: each profile keeps its own patience, a Policy's
// override replaces one profile only, and a profile with Tries turns a
// retry into Fail once they are spent (a permanent answer fails at once).
func TestPolicyProfiles(t *testing.T) {
	t.Parallel()
	half := func() float64 { return 0.5 }
	p := Policy{Rand: half}
	for pr, want := range map[Profile]time.Duration{
		ProfileJob: 1500 * time.Millisecond, ProfileOneShot: 1500 * time.Millisecond, ProfileAfter: 7500 * time.Millisecond,
		ProfileWebhook: 7500 * time.Millisecond, ProfileStore: 750 * time.Millisecond, ProfileToken: 22500 * time.Millisecond,
		ProfileConfig: 3750 * time.Millisecond,
	} {
		if got := p.Wait(pr, 1); got != want {
			t.Errorf("%s: first wait %v, want %v", pr, got, want)
		}
	}
	q := p.With(ProfileStore, Backoff{Base: time.Millisecond, Cap: time.Millisecond, Jitter: NoJitter})
	if got := q.Wait(ProfileStore, 3); got != time.Millisecond {
		t.Errorf("overridden store wait %v", got)
	}
	if got := q.Wait(ProfileJob, 1); got != 1500*time.Millisecond {
		t.Errorf("job wait changed by another profile's override: %v", got)
	}
	if p.Patience != nil {
		t.Error("With changed the policy it was called on")
	}

	ctx := context.Background()
	transient := fakeStatus{status: 503}
	for try := 1; try < 5; try++ {
		if d := p.DecideAs(ProfileOneShot, ctx, transient, try, time.Now()); d.Action != Retry {
			t.Fatalf("one-shot try %d: %v, want retry", try, d.Action)
		}
	}
	if d := p.DecideAs(ProfileOneShot, ctx, transient, 5, time.Now()); d.Action != Fail || !strings.Contains(d.Reason, "gave up after 5 tries") {
		t.Errorf("one-shot's fifth try: %+v, want fail with the reason", d)
	}
	if d := p.DecideAs(ProfileJob, ctx, transient, 500, time.Now()); d.Action != Retry {
		t.Errorf("a job never gives up: %v", d.Action)
	}
	if d := p.DecideAs(ProfileWebhook, ctx, fakeStatus{status: 404}, 1, time.Now()); d.Action != Fail {
		t.Errorf("webhook 404: %v, want fail", d.Action)
	}
}

// TestPolicyCapsServerWait: a Retry-After or a reset years away (a hostile
// or broken answer) delays a retry by MaxServerWait at most, and a short
// one still lengthens the backoff.
func TestPolicyCapsServerWait(t *testing.T) {
	t.Parallel()
	half := func() float64 { return 0.5 }
	years := 315360000 * time.Second
	now := time.Now()
	for _, tc := range []struct {
		name string
		p    Policy
		wait time.Duration
		want time.Duration
	}{
		{"default cap", Policy{}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: half}), years, DefaultMaxServerWait},
		{"configured cap", Policy{MaxServerWait: 90 * time.Second}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: half}), years, 90 * time.Second},
		{"under the cap", Policy{MaxServerWait: 90 * time.Second}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: half}), 40 * time.Second, 40 * time.Second},
		{"cap below the backoff", Policy{MaxServerWait: time.Second}.With(ProfileJob, Backoff{Base: 4 * time.Second, Cap: time.Minute, Jitter: EqualJitter, Rand: half}), years, 3 * time.Second},
	} {
		d := tc.p.Decide(context.Background(), fakeWait{fakeStatus{503, false}, tc.wait}, 1, now)
		if d.Action != Retry || d.Delay != tc.want {
			t.Errorf("%s: %v after %s, want retry after %s", tc.name, d.Action, d.Delay, tc.want)
		}
	}
}

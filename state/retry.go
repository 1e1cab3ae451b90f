package state

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"
)

// Action is what a caller does about an error: the worker for a job's
// stage, the one-shot commands for a call, the token prober for a probe.
type Action int

const (
	// Retry: the same step again after the decision's Delay (network
	// errors, timeouts, a stalled upload, 408, 429, 5xx).
	Retry Action = iota
	// Resign: storage refused the signed URL (expired, revoked, key gone):
	// sign a new one, then upload again after Delay.
	Resign
	// WaitFile: the file is still being written; look again after Delay
	// without counting a failure.
	WaitFile
	// PauseToken: the API refuses the token (401). Pause all work and
	// probe; never fail a job or count an attempt for it.
	PauseToken
	// Fail: permanent (API 400/403/404/409/413, an invalid file); retrying
	// would get the same answer. Fail the job with the reason.
	Fail
	// Stop: the caller's own context ended (shutdown, Ctrl-C): not the
	// job's fault; commit nothing.
	Stop
	// WaitConfig: the configuration or the machine's environment is wrong
	// (a TLS certificate that does not verify, a host name that does not
	// resolve, a host that keeps refusing connections): no retry of this
	// job can fix it, and failing the job would lose it. Pause all work
	// like PauseToken, report the Kind (not ready, alert), try again after
	// Delay and resume by itself once it clears.
	WaitConfig
	// Hold: the call may have taken effect although its 2xx answer could
	// not be read (a legacy publish), so repeating it could do it twice.
	// Never repeat it: hold the job for an operator, or give up.
	Hold
)

func (a Action) String() string {
	switch a {
	case Retry:
		return "retry"
	case Resign:
		return "resign"
	case WaitFile:
		return "wait"
	case PauseToken:
		return "pause"
	case Fail:
		return "fail"
	case Stop:
		return "stop"
	case WaitConfig:
		return "config"
	case Hold:
		return "hold"
	}
	return "unknown"
}

// Decision is the retry rule's answer: what to do, and after how long.
type Decision struct {
	Action Action
	Delay  time.Duration
	// Kind is the configuration class of a WaitConfig decision (ConfigTLS,
	// ConfigDNS, ConfigRefused), empty otherwise.
	Kind string
	// Reason, when set, is the operator's one line for a Fail that the rule
	// itself decided (a file incomplete for too long); otherwise the
	// error's own text says it.
	Reason string
}

// Profile names a kind of caller of the retry rule. Every retry in the
// program is one of these; each has its own patience (Patience): how its
// delays grow and whether it gives up.
type Profile int

const (
	// ProfileJob is a job's step in the daemon: it never gives up (a job is
	// failed only by a permanent answer), 2 s doubling to 5 min.
	ProfileJob Profile = iota
	// ProfileOneShot is a step of `splatd publish` / `checkpoints`: someone
	// waits at a terminal, so it gives up after 5 tries, on the job backoff.
	ProfileOneShot
	// ProfilePart is one v1 part PUT inside a job's upload step: the job's
	// pace, never giving up while the job runs.
	ProfilePart
	// ProfileAfter is a final job's after-action (receipt, move, delete):
	// 10 s doubling to 10 min, for as long as the daemon runs. It is never
	// given up, not even on an error that fails a job step: the job is
	// final already, and a fixed folder or disk lets the action through.
	ProfileAfter
	// ProfileWebhook is one webhook delivery: 5 tries about 10, 20, 40, 80 s
	// apart, so a receiver's restart or deploy is bridged.
	ProfileWebhook
	// ProfileStore is the job store failing (full disk, I/O error): 1 s
	// doubling to 30 s, for as long as it fails.
	ProfileStore
	// ProfileToken is the token prober while the API refuses the token:
	// 30 s doubling to 5 min (retrying every job would only burn the limit).
	ProfileToken
	// ProfileConfig paces the pauses of a configuration error (WaitConfig):
	// 5 s doubling to 5 min.
	ProfileConfig
)

var profileNames = [...]string{"job", "one-shot", "part", "after-action", "webhook", "store", "token prober", "config pause"}

func (p Profile) String() string {
	if int(p) < len(profileNames) {
		return profileNames[p]
	}
	return "unknown"
}

// Patience is how a kind of caller retries.
type Patience struct {
	Backoff Backoff
	// Tries bounds the attempts of one step; after the last, a decision to
	// retry becomes Fail. Zero: never give up.
	Tries int
}

// DefaultPatience is every profile's patience unless a Policy overrides it.
var DefaultPatience = map[Profile]Patience{
	ProfileJob:     {Backoff: DefaultBackoff},
	ProfileOneShot: {Backoff: DefaultBackoff, Tries: 5},
	ProfilePart:    {Backoff: DefaultBackoff},
	ProfileAfter:   {Backoff: Backoff{Base: 10 * time.Second, Cap: 10 * time.Minute, Jitter: EqualJitter}},
	ProfileWebhook: {Backoff: Backoff{Base: 10 * time.Second, Cap: 2 * time.Minute, Jitter: EqualJitter}, Tries: 5},
	ProfileStore:   {Backoff: Backoff{Base: time.Second, Cap: 30 * time.Second, Jitter: EqualJitter}},
	ProfileToken:   {Backoff: Backoff{Base: 30 * time.Second, Cap: 5 * time.Minute, Jitter: EqualJitter}},
	ProfileConfig:  {Backoff: Backoff{Base: 5 * time.Second, Cap: 5 * time.Minute, Jitter: EqualJitter}},
}

// Policy is the one retry rule. Every retry in the program asks it both
// what to do (Decide, DecideAs) and how long to wait (the decision's Delay,
// or Wait for a caller with no error to classify, such as the store's).
type Policy struct {
	// Patience overrides profiles' DefaultPatience (tests use short ones);
	// a profile missing here, or with a zero Backoff.Base, has its default.
	Patience map[Profile]Patience
	// Rand, when set, randomises every profile's jitter (tests fix it).
	Rand func() float64
	// Settle paces WaitFile: the first look after Settle, doubling to a
	// minute. Zero: 2 s.
	Settle time.Duration
	// IncompleteTimeout fails a file that is still incomplete this long
	// after it last changed (its mtime): a truncated export does not wait
	// for ever. Zero: 1 h; negative: never.
	IncompleteTimeout time.Duration
	// RefusedGrace is how long a host may refuse connections (a restart, a
	// deploy) before that is a configuration class error (WaitConfig):
	// measured over the same step's consecutive failures, as the sum of
	// the job backoff's shortest delays. Zero: 2 min.
	RefusedGrace time.Duration
	// MaxServerWait caps every delay a server asks for (Retry-After, a
	// 429's reset): a server, or a hostile answer on its path, can
	// lengthen a retry to this and no further; asked for more, the job
	// tries again then and the server may ask again. Zero:
	// DefaultMaxServerWait. It never shortens the backoff's own delay.
	MaxServerWait time.Duration
}

// With returns a copy of p whose profile pr has backoff b (and its default
// Tries): how tests and the daemon set a patience.
func (p Policy) With(pr Profile, b Backoff) Policy {
	m := make(map[Profile]Patience, len(p.Patience)+1)
	for k, v := range p.Patience {
		m[k] = v
	}
	pt := p.PatienceOf(pr)
	pt.Backoff = b
	m[pr] = pt
	p.Patience = m
	return p
}

// PatienceOf returns profile pr's patience under p.
func (p Policy) PatienceOf(pr Profile) Patience {
	pt, ok := p.Patience[pr]
	if !ok || pt.Backoff.Base <= 0 {
		tries := pt.Tries
		pt = DefaultPatience[pr]
		if ok && tries != 0 {
			pt.Tries = tries
		}
	}
	if pt.Backoff.Rand == nil {
		pt.Backoff.Rand = p.Rand
	}
	return pt
}

// Wait is the pause before the attempt-th retry of a caller of profile pr
// that has no error to classify (the store failing, the token prober).
func (p Policy) Wait(pr Profile, attempt int) time.Duration {
	return p.PatienceOf(pr).Backoff.Delay(attempt)
}

// DefaultMaxServerWait is Policy.MaxServerWait's zero value: twice the
// backoff's own cap (5 min), so an outage window or an hourly quota costs
// a job at most six extra requests an hour, and a job is never parked
// further out than an operator would wait before looking.
const DefaultMaxServerWait = 10 * time.Minute

// DefaultIncompleteTimeout is Policy.IncompleteTimeout's zero value.
const DefaultIncompleteTimeout = time.Hour

// The configuration classes of WaitConfig, a label of the
// splatd_config_error gauge.
const (
	ConfigTLS     = "tls"     // certificate verification failed (unknown authority, bad or expired certificate, wrong host name)
	ConfigDNS     = "dns"     // the host name does not resolve
	ConfigRefused = "refused" // the host refuses connections for longer than RefusedGrace
)

// ConfigKinds lists the configuration classes (metrics pre-initialise them).
var ConfigKinds = []string{ConfigTLS, ConfigDNS, ConfigRefused}

// Decide says what to do about err, the attempt-th failure in a row of the
// same step (1 for the first). ownCtx is the caller's context: a
// cancellation that is not the caller's own is a timeout somewhere below
// and is retried. now is the caller's clock, for a 429's reset time.
func (p Policy) Decide(ctx context.Context, err error, attempt int, now time.Time) Decision {
	return p.DecideAs(ProfileJob, ctx, err, attempt, now)
}

// DecideAs is Decide for a caller of profile pr: its backoff paces Retry
// and Resign, and once its Tries are spent a Retry or Resign becomes Fail
// (the error's text is the reason).
func (p Policy) DecideAs(pr Profile, ctx context.Context, err error, attempt int, now time.Time) Decision {
	pt := p.PatienceOf(pr)
	d := p.decide(pt.Backoff, ctx, err, attempt, now)
	if pr == ProfileAfter && d.Action != Stop {
		return Decision{Action: Retry, Delay: pt.Backoff.Delay(attempt)}
	}
	if pt.Tries > 0 && attempt >= pt.Tries && (d.Action == Retry || d.Action == Resign) {
		return Decision{Action: Fail, Reason: fmt.Sprintf("gave up after %d tries: %v", attempt, err)}
	}
	return d
}

func (p Policy) decide(b Backoff, ctx context.Context, err error, attempt int, now time.Time) Decision {
	switch {
	case err == nil:
		return Decision{Action: Retry} // a caller's bug: retrying beats failing
	case ctx != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return Decision{Action: Stop}
	}
	var ur unrepeatable
	if errors.As(err, &ur) && ur.Unrepeatable() {
		return Decision{Action: Hold}
	}
	var inc incompleteError
	if errors.As(err, &inc) && inc.Incomplete() {
		return p.incomplete(b, err, attempt, now)
	}
	var inv invalidError
	if errors.As(err, &inv) && inv.Invalid() {
		return Decision{Action: Fail}
	}
	if kind := ConfigKind(err); kind != "" && (kind != ConfigRefused || p.refusedTooLong(b, attempt)) {
		var sh storageHost
		if kind != ConfigTLS && errors.As(err, &sh) && sh.FromStorage() {
			// A storage host that refuses or does not resolve is named by
			// a signed URL, the API's choice: a fresh one may name
			// another. Pausing every worker for it (a configuration
			// error) held up the jobs that needed no storage at all.
			return Decision{Action: Resign, Delay: b.Delay(attempt)}
		}
		return Decision{Action: WaitConfig, Kind: kind, Delay: p.ConfigPause(1)}
	}
	var se statusError
	if errors.As(err, &se) {
		if d, ok := statusDecision(b, se, attempt); ok {
			return d
		}
	}
	// Network errors, timeouts (context.DeadlineExceeded), a stalled
	// upload, protocol errors, 408, 429, 5xx: the next attempt may well
	// succeed.
	d := b.Delay(attempt)
	var wh waitHint
	if errors.As(err, &wh) {
		d = max(d, p.serverWait(wh.RetryWait(now)))
	}
	return Decision{Action: Retry, Delay: d}
}

// incomplete is the decision on a file not yet whole: wait for it with
// the settle time's backoff, or fail it once it has not changed for
// incomplete_timeout.
func (p Policy) incomplete(b Backoff, err error, attempt int, now time.Time) Decision {
	limit := p.IncompleteTimeout
	if limit == 0 {
		limit = DefaultIncompleteTimeout
	}
	var since incompleteSince
	if limit > 0 && errors.As(err, &since) && !since.ChangedAt().IsZero() && now.Sub(since.ChangedAt()) > limit {
		return Decision{Action: Fail, Reason: fmt.Sprintf("file still incomplete after %s: %v", ShortDuration(limit), err)}
	}
	settle := p.Settle
	if settle <= 0 {
		settle = 2 * time.Second
	}
	return Decision{Action: WaitFile, Delay: Backoff{Base: settle, Cap: max(settle, time.Minute), Jitter: EqualJitter, Rand: b.Rand}.Delay(attempt)}
}

// statusDecision is the decision an HTTP status alone settles; false for
// the statuses that are retried (408, 429, 5xx).
func statusDecision(b Backoff, se statusError, attempt int) (Decision, bool) {
	status, storage := se.HTTPStatus(), se.FromStorage()
	switch {
	case storage && (status == 401 || status == 403 || status == 404):
		// A presigned URL that expired or was refused: the first two
		// times, sign again at once (a URL can expire on a slow path);
		// a storage that keeps refusing fresh URLs (clock skew, a
		// revoked key, a header it will not accept) is not hammered.
		d := time.Duration(0)
		if attempt > 2 {
			d = b.Delay(attempt - 2)
		}
		return Decision{Action: Resign, Delay: d}, true
	case status == 401:
		return Decision{Action: PauseToken}, true
	case status >= 400 && status < 500 && status != 408 && status != 429:
		return Decision{Action: Fail}, true
	}
	return Decision{}, false
}

// serverWait caps a delay a server asked for at MaxServerWait.
func (p Policy) serverWait(d time.Duration) time.Duration {
	limit := p.MaxServerWait
	if limit <= 0 {
		limit = DefaultMaxServerWait
	}
	return min(d, limit)
}

// ConfigPause is the length of the n-th pause in a row for a WaitConfig
// decision (ProfileConfig): the caller counts its pauses, since a paused
// job's attempts do not grow.
func (p Policy) ConfigPause(n int) time.Duration { return p.Wait(ProfileConfig, n) }

// refusedTooLong reports whether attempt consecutive refusals span more
// than RefusedGrace: the sum of the shortest delays b waits between them.
func (p Policy) refusedTooLong(b Backoff, attempt int) bool {
	grace := p.RefusedGrace
	if grace <= 0 {
		grace = 2 * time.Minute
	}
	shortest := b
	shortest.Rand = func() float64 { return 0 }
	var spent time.Duration
	for i := 1; i < attempt; i++ {
		spent += shortest.Delay(i)
		if spent > grace {
			return true
		}
	}
	return false
}

// ConfigKind classifies err as an error of configuration or environment
// that no retry fixes (ConfigTLS, ConfigDNS, ConfigRefused), or "". A
// refused connection is "refused" here; Decide gives it RefusedGrace first.
// Temporary DNS failures (no network, a timeout) are not "dns": they retry.
func ConfigKind(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		dnsErr   *net.DNSError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname), errors.As(err, &verify):
		return ConfigTLS
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return ConfigDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConfigRefused
	}
	return ""
}

// ShortDuration prints d the way people write it: 1h, 90m, 1h30m, 45s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// The small interfaces the rule works through, so that state imports
// neither the API client nor the file checker. api.APIError implements
// statusError and waitHint; splatfile.InvalidError implements invalidError.
type (
	statusError interface {
		HTTPStatus() int
		FromStorage() bool
	}
	waitHint interface {
		// RetryWait is how long the server asked us to wait (Retry-After,
		// or until a 429's window reset), measured from now.
		RetryWait(now time.Time) time.Duration
	}
	invalidError interface{ Invalid() bool }
	// storageHost is an error on the way to object storage (a signed
	// URL's host), not to the API.
	storageHost interface{ FromStorage() bool }
	// unrepeatable is a call whose effect is unknown and must not be
	// repeated (api.ProtocolError of a legacy publish).
	unrepeatable    interface{ Unrepeatable() bool }
	incompleteError interface{ Incomplete() bool }
	// incompleteSince is an incomplete file's last change (its mtime), for
	// IncompleteTimeout; an incomplete error without it waits for ever.
	incompleteSince interface{ ChangedAt() time.Time }
)

// HTTPStatus returns the HTTP status carried by err, or 0.
func HTTPStatus(err error) int {
	var se statusError
	if errors.As(err, &se) {
		return se.HTTPStatus()
	}
	return 0
}

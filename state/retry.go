package state

import (
	"context"
	"errors"
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
	}
	return "unknown"
}

// Decision is the retry rule's answer: what to do, and after how long.
type Decision struct {
	Action Action
	Delay  time.Duration
}

// Policy is the one retry rule, with its backoffs. The worker and the
// one-shot commands use the same rule; only their patience differs (the
// one-shot commands give up after a few attempts, the daemon never does).
type Policy struct {
	// Backoff paces Retry and Resign: 2 s doubling to 5 min, equal jitter,
	// when zero (DefaultBackoff). A server's Retry-After, or a 429's reset,
	// lengthens a delay, never shortens it.
	Backoff Backoff
	// Settle paces WaitFile: the first look after Settle, doubling to a
	// minute. Zero: 2 s.
	Settle time.Duration
}

// Decide says what to do about err, the attempt-th failure in a row of the
// same step (1 for the first). ownCtx is the caller's context: a
// cancellation that is not the caller's own is a timeout somewhere below
// and is retried. now is the caller's clock, for a 429's reset time.
func (p Policy) Decide(ctx context.Context, err error, attempt int, now time.Time) Decision {
	b := p.Backoff
	if b.Base <= 0 {
		b.Base, b.Cap, b.Jitter = DefaultBackoff.Base, DefaultBackoff.Cap, DefaultBackoff.Jitter
	}
	switch {
	case err == nil:
		return Decision{Action: Retry} // a caller's bug: retrying beats failing
	case ctx != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return Decision{Action: Stop}
	}
	var inc incompleteError
	if errors.As(err, &inc) && inc.Incomplete() {
		settle := p.Settle
		if settle <= 0 {
			settle = 2 * time.Second
		}
		return Decision{Action: WaitFile, Delay: Backoff{Base: settle, Cap: max(settle, time.Minute), Jitter: EqualJitter, Rand: b.Rand}.Delay(attempt)}
	}
	var inv invalidError
	if errors.As(err, &inv) && inv.Invalid() {
		return Decision{Action: Fail}
	}
	var se statusError
	if errors.As(err, &se) {
		status, storage := se.HTTPStatus(), se.FromStorage()
		switch {
		case storage && (status == 401 || status == 403 || status == 404):
			// A presigned URL that expired or was refused: the first time,
			// sign again at once; a storage that keeps refusing fresh URLs
			// (clock skew, a revoked key) is not hammered.
			d := time.Duration(0)
			if attempt > 1 {
				d = b.Delay(attempt - 1)
			}
			return Decision{Action: Resign, Delay: d}
		case status == 401:
			return Decision{Action: PauseToken}
		case status >= 400 && status < 500 && status != 408 && status != 429:
			return Decision{Action: Fail}
		}
	}
	// Network errors, timeouts (context.DeadlineExceeded), a stalled
	// upload, protocol errors, 408, 429, 5xx: the next attempt may well
	// succeed.
	d := b.Delay(attempt)
	var wh waitHint
	if errors.As(err, &wh) {
		d = max(d, wh.RetryWait(now))
	}
	return Decision{Action: Retry, Delay: d}
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
	invalidError    interface{ Invalid() bool }
	incompleteError interface{ Incomplete() bool }
)

// HTTPStatus returns the HTTP status carried by err, or 0.
func HTTPStatus(err error) int {
	var se statusError
	if errors.As(err, &se) {
		return se.HTTPStatus()
	}
	return 0
}

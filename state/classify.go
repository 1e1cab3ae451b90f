package state

import (
	"context"
	"errors"
)

// Class is what the worker does about an error.
type Class int

const (
	// Transient: retry the same stage after a backoff (network errors,
	// timeouts, 5xx, 429, storage refusing a signed URL).
	Transient Class = iota
	// Permanent: fail the job with the reason (API 400/403/404, invalid
	// file). Retrying would give the same answer.
	Permanent
	// Auth: the token is refused (401). Pause all work and probe; never
	// fail a job or count an attempt for it.
	Auth
	// Wait: the file is still being written; check again later without
	// counting a failure.
	Wait
	// Canceled: the daemon is shutting down; not the job's fault.
	Canceled
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Auth:
		return "auth"
	case Wait:
		return "wait"
	case Canceled:
		return "canceled"
	}
	return "unknown"
}

// The small interfaces classification works through, so that state imports
// neither the API client nor the file checker. uploader.APIError implements
// statusError; splatfile.InvalidError implements invalidError.
type (
	statusError interface {
		HTTPStatus() int
		FromStorage() bool
	}
	invalidError    interface{ Invalid() bool }
	incompleteError interface{ Incomplete() bool }
)

// Classify says what to do about err. A nil error is Transient only so that
// a caller's bug retries rather than fails; callers check nil first.
func Classify(err error) Class {
	if err == nil {
		return Transient
	}
	if errors.Is(err, context.Canceled) {
		return Canceled
	}
	var inc incompleteError
	if errors.As(err, &inc) && inc.Incomplete() {
		return Wait
	}
	var inv invalidError
	if errors.As(err, &inv) && inv.Invalid() {
		return Permanent
	}
	var se statusError
	if errors.As(err, &se) {
		return classifyStatus(se.HTTPStatus(), se.FromStorage())
	}
	// Network errors, timeouts (context.DeadlineExceeded), protocol errors:
	// the next attempt may well succeed.
	return Transient
}

// classifyStatus uses bare status numbers: state must not import net/http.
func classifyStatus(status int, storage bool) Class {
	switch {
	case status == 0, status == 429, status == 408, status >= 500:
		return Transient
	case storage && (status == 401 || status == 403 || status == 404):
		// A presigned URL that expired or was refused: sign again.
		return Transient
	case status == 401:
		return Auth
	case status >= 400:
		return Permanent
	}
	return Transient
}

// NeedsNewURL reports whether err means storage refused the signed URL
// (expired, revoked, key gone), so the job must sign again before uploading.
func NeedsNewURL(err error) bool {
	var se statusError
	if !errors.As(err, &se) || !se.FromStorage() {
		return false
	}
	switch se.HTTPStatus() {
	case 401, 403, 404:
		return true
	}
	return false
}

// HTTPStatus returns the HTTP status carried by err, or 0.
func HTTPStatus(err error) int {
	var se statusError
	if errors.As(err, &se) {
		return se.HTTPStatus()
	}
	return 0
}

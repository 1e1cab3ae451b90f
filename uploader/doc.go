// Package uploader talks to the splat publishing API: a concrete HTTPS
// client for its five calls (sign, storage PUT, publish, get-splat,
// checkpoints), the typed errors those calls return, a rate-limit pacer
// shared by every goroutine that uses one token, and the worker that advances
// one job one stage.
//
// The client makes exactly one attempt per call and returns its error
// (*APIError for any non-2xx answer, *ProtocolError for a 2xx answer it
// cannot use, a wrapped transport error otherwise); deciding whether to retry
// belongs to the caller, which knows the job's stage. Pacing, by contrast, is
// done inside the client, because every caller must obey the same per-account
// budget and only a single shared view of the X-RateLimit-* headers can keep
// the daemon from earning 429s.
//
// Two conditions never wait silently (stages.go). A configuration error
// that no retry can fix (state.WaitConfig: a certificate that does not
// verify, a host name that does not resolve, a host refusing connections for
// longer than a grace) pauses every worker on its own backoff, shows on the
// waiting job and through ConfigError (/readyz not ready, the
// splatd_config_error gauge), and clears by itself when a network step
// succeeds again. The after-action of a final job (receipt, move, delete) is
// a stage of its own: a failure is recorded on the job, counted, reported by
// AfterErrors (/readyz "degraded:") and retried on AfterBackoff while the
// pool runs, never only at the next start.
//
// Secrets: the bearer token is only ever sent to the API base URL's origin and
// never to object storage; a signed URL's query string (its signature) is
// removed from every error text the package produces.
package uploader

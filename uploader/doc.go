// Package uploader is the worker pool: it claims jobs from the store and
// advances each one committed stage at a time, through the steps of the
// configured protocol (legacy: sign, PUT, publish; v1: an upload session,
// parts in parallel, complete), then polls until processing ends and hands
// the final job to the after-actions. `splatd publish` runs the same pool
// over a store of one job in memory (PublishOne).
//
// Every error goes through the one retry rule, state.Policy.Decide: retry
// the step later, sign again, wait for the file, pause every worker while
// the API refuses the token (the prober reloads the token source and tries
// it with backoff), or fail the job with the reason.
//
// The package map under uploader:
//   - api: the HTTP clients of both protocols, wire types, typed errors,
//     redaction, the token source, the bandwidth limiter and the streaming
//     PUTs. It knows nothing of jobs.
//   - pace: the rate-limit pacer the client waits on (one window per limit
//     class, kept across restarts).
//   - after: after-actions (keep, delete, move) and receipts.
//   - sidecar: a file's publish parameters (config, title template, sidecar).
//   - splatfile: the local content check of PLY and SOG files.
//   - apisim: the simulator of the whole API and its storage (tests, demo).
//
// uploader declares what it needs of the outside (options.go: Store, Files,
// Peers, Finisher, Observer); queue.Store and cmd/internal/daemon implement
// them, each asserted where they meet.
//
// Two conditions never wait silently. A configuration error (configpause.go)
// that no retry can fix (state.WaitConfig: a certificate that does not
// verify, a host name that does not resolve, a host refusing connections for
// longer than a grace) pauses every worker on its own backoff, shows on the
// waiting job and through ConfigError (/readyz not ready, the
// splatd_config_error gauge), and clears by itself when a network step
// succeeds again. The after-action of a final job (receipt, move, delete;
// afterstage.go) is a stage of its own: a failure is recorded on the job,
// counted, reported by AfterErrors (/readyz "degraded:") and retried on the
// after-action patience while the pool runs, never only at the next start.
package uploader

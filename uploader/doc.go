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
// Secrets: the bearer token is only ever sent to the API base URL's origin and
// never to object storage; a signed URL's query string (its signature) is
// removed from every error text the package produces.
package uploader

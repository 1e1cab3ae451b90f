// Package api talks to the splat publishing service: one concrete HTTPS
// client for both of its protocols — the legacy API (docs/api-legacy.md: sign,
// storage PUT, publish, get-splat, checkpoints) and the SuperSplat API v1
// (docs/api-v1.md: me, splats, upload sessions, part URLs, part PUTs, complete)
// — with the wire types and their tolerant decoding, the typed errors those
// calls return, the token source, and the bandwidth limiter shared by every
// upload stream. Each API call first waits on the rate-limit pacer shared by
// every goroutine that uses one token (the Pacer interface; package pace).
//
// The client makes exactly one attempt per call and returns its error
// (*APIError for any non-2xx answer, *ProtocolError for a 2xx answer it
// cannot use, *RequestError for a request refused before sending, a wrapped
// transport error otherwise); whether to retry is the caller's decision,
// through the one retry rule (state.Policy). Pacing, by contrast, is done
// inside the client, because every caller must obey the same per-account
// budget and only a single shared view of the X-RateLimit-* headers can
// keep the daemon from earning 429s.
//
// Secrets: the bearer token is only ever sent to the API base URL's origin
// and never to object storage; a signed URL's query string (its signature)
// is removed from every error text the package produces.
package api

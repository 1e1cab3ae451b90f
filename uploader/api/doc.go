// Package api is the HTTPS client of the splat publishing service's two
// protocols, the legacy API (docs/api-legacy.md) and the SuperSplat API v1
// (docs/api-v1.md), with their wire types, typed errors, the token source and
// the bandwidth limiter shared by every upload stream.
//
// Each call makes one attempt and returns its error: *APIError for a non-2xx
// answer, *ProtocolError for a 2xx answer it cannot use, *RequestError for a
// request refused before sending, a wrapped transport error otherwise.
// Retrying is the caller's (state.Policy); pacing is the client's, through
// the Pacer that every user of one token shares.
//
// The bearer token goes only to the API base URL's origin, never to storage;
// a signed URL's query is removed from every error text.
package api

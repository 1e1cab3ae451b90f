package apisim

import (
	"maps"
	"net/http"
	"time"
)

// Faults are the failure knobs. Tests change them at runtime with SetFaults;
// every request reads them under the server's lock, so a change applies to
// the next request. Rates are probabilities in [0, 1] drawn from the seeded
// generator.
type Faults struct {
	// ErrorRate maps an API route (Route* constant) to the probability of
	// answering ErrorStatus with an {"error": ...} body before doing
	// anything: the request has no effect (a certain failure).
	ErrorRate map[string]float64
	// ErrorStatus is the status of ErrorRate answers. Default 500.
	ErrorStatus int
	// Errors fails the next N requests of a route (Route* name) as
	// ErrorRate does, each decrementing it.
	Errors map[string]int
	// ErrorRetryAfter, when set, is sent as the Retry-After header of the
	// ErrorRate and Errors answers (a server asking for a delay, even an
	// absurd one such as 315360000).
	ErrorRetryAfter string

	// StorageErrorRate is the probability that a storage PUT is answered
	// 503 SlowDown (S3-style XML body) after reading up to 64 MiB of its
	// body (beyond that the connection is closed after the answer).
	StorageErrorRate float64
	// StorageResetRate is the probability that a storage PUT's connection is
	// reset after reading part of its body (no object is stored).
	StorageResetRate float64
	// StorageForbiddenRate is the probability that a storage PUT with a
	// valid signature is refused 403 as expired, as when the client was
	// slower than the URL's life.
	StorageForbiddenRate float64

	// ExpiredURLs hands out the next N legacy signed URLs already
	// expired, so that storage refuses them 403 AccessDenied "Request has
	// expired" (with Options.S3, S3 does: the signing waits about a
	// second for that).
	ExpiredURLs int

	// WrongRegionURLs (S3 mode only) signs the next N URLs, legacy or
	// part, for another region than the S3 server's, as a misconfigured
	// API server would: S3 refuses them 400 AuthorizationQueryParametersError,
	// a refusal that signing again does not cure.
	WrongRegionURLs int

	// Latency is added before every request (API and storage) is handled.
	Latency time.Duration

	// Force429 answers every API request 429 with Remaining 0 (not charged
	// to the window): a server shedding load.
	Force429 bool
	// Neighbour is the number of requests, per class, that another machine
	// sharing the token spends at the start of every window of every token.
	// Set it to the class limit for a 429 storm the headers announce.
	Neighbour map[Class]int

	// UncertainPublishes makes the next N publishes create the splat and
	// then answer 500: the client cannot know that it succeeded. Each such
	// publish decrements it; Faults() shows what is left.
	UncertainPublishes int
	// ProcessingFailRate is the probability that processing of a valid file
	// ends "failed" anyway (legacy publishes and v1 completes).
	ProcessingFailRate float64

	// The v1 knobs. ErrorRate, Latency, Force429 and Neighbour apply to the
	// v1 routes too (by their Route* names), and the Storage* rates to part
	// PUTs as well as object PUTs. A count N fires on the next N
	// occasions and is decremented each time (Faults shows what is left);
	// a rate is drawn on the occasions the count did not take.

	// PartErrors and PartErrorRate refuse part PUTs with PartErrorStatus
	// (default 503; 500 and 503 carry S3's InternalError and SlowDown
	// bodies) after reading up to 64 MiB of the body: nothing is stored.
	PartErrors      int
	PartErrorRate   float64
	PartErrorStatus int
	// PartResets and PartResetRate reset a part PUT's connection after
	// reading part of its body: nothing is stored.
	PartResets    int
	PartResetRate float64
	// ExpiredPartURLs refuses the next N part PUTs with a valid signature
	// 403 AccessDenied "Request has expired", as when the client was slower
	// than the URL's life. (Real expiry follows URLExpiry and the clock.)
	// With Options.S3 the next N part URLs are handed out expired instead
	// and S3 refuses them.
	ExpiredPartURLs int

	// UncertainCreates and UncertainCreateRate make a create commit the
	// session (and its Idempotency-Key) and then answer 502: the client
	// cannot know that it succeeded.
	UncertainCreates    int
	UncertainCreateRate float64
	// UncertainCompletes and UncertainCompleteRate make a complete create
	// the splat and then answer 502; a repeated complete answers 200.
	UncertainCompletes    int
	UncertainCompleteRate float64
}

// take draws a count-or-rate fault: the count fires first, then the rate.
// Callers hold s.mu (n points into s.faults).
func (s *Server) take(n *int, rate float64) bool {
	if *n > 0 {
		*n--
		return true
	}
	return s.roll(rate)
}

func (f Faults) partErrorStatus() int {
	if f.PartErrorStatus >= 400 && f.PartErrorStatus <= 599 {
		return f.PartErrorStatus
	}
	return http.StatusServiceUnavailable
}

func (f Faults) clone() Faults {
	f.ErrorRate = maps.Clone(f.ErrorRate)
	f.Errors = maps.Clone(f.Errors)
	f.Neighbour = maps.Clone(f.Neighbour)
	return f
}

// SetFaults replaces all fault settings.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f.clone()
}

// UpdateFaults applies fn to the current settings under the lock, for
// changing one knob without losing the others (e.g. a counter left in
// UncertainPublishes).
func (s *Server) UpdateFaults(fn func(*Faults)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults.clone()
	fn(&f)
	s.faults = f
}

// Faults returns a copy of the current fault settings.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.clone()
}

// Consume charges n requests of an outside party to token's current window
// of class, as a neighbour sharing the token would; the client sees it only
// through X-RateLimit-Remaining (and 429s).
func (s *Server) Consume(token string, class Class, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limiter.consume(s.now(), bucketKey{token, class}, n)
}

// takeError draws a route's counted error (Faults.Errors). Callers hold s.mu.
func (s *Server) takeError(route string) bool {
	if s.faults.Errors[route] > 0 {
		s.faults.Errors[route]--
		return true
	}
	return false
}

// roll draws a fault with probability p. Callers hold s.mu.
func (s *Server) roll(p float64) bool {
	return p > 0 && s.rng.Float64() < p
}

func (f Faults) errorStatus() int {
	if f.ErrorStatus >= 400 && f.ErrorStatus <= 599 {
		return f.ErrorStatus
	}
	return http.StatusInternalServerError
}

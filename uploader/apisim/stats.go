package apisim

import (
	"maps"
	"slices"
	"time"
)

// Stats are the server's counters, as tests read them. Every count is since
// New (or the last ResetStats).
type Stats struct {
	// Requests counts answers per route and HTTP status. Status 0 means the
	// connection was dropped on purpose (StorageResetRate); 499 means the
	// client gave up during injected Latency.
	Requests map[string]map[int]int
	// RateLimited counts 429 answers (by the window or by Force429).
	RateLimited int
	// Unauthorized counts 401 answers.
	Unauthorized int
	// Faults counts answers caused by fault knobs (5xx, storage 503/403,
	// resets, uncertain publishes).
	Faults int

	// SignedURLs counts signed URLs issued.
	SignedURLs int
	// Uploads counts completed storage PUTs; UploadBytes their bytes.
	Uploads     int
	UploadBytes int64
	// UploadResets counts PUTs cut by StorageResetRate.
	UploadResets int
	// StorageAuthHeaders counts storage requests that carried an
	// Authorization header; a correct client keeps it at 0.
	StorageAuthHeaders int
	// StorageOddContentType counts storage PUTs whose Content-Type was not
	// docs/api-legacy.md's binary/octet-stream (accepted anyway; a presigned URL
	// that signs the type would refuse them).
	StorageOddContentType int
	// StorageRefused counts storage PUTs refused for a bad or expired
	// signature (not counting StorageForbiddenRate).
	StorageRefused int

	// Publishes counts legacy publishes that created a splat (including
	// uncertain ones); Duplicates counts splats of either protocol whose
	// object hash had already been published.
	Publishes  int
	Duplicates int
	// KeyFieldMismatches counts publishes that sent the key under the other
	// name than the signed-URL response used (accepted anyway).
	KeyFieldMismatches int

	// Creates counts v1 sessions created (201, or 502 with UncertainCreates);
	// CreateReplays counts creates answered 200 with the session an
	// Idempotency-Key already named; KeyMismatches counts those replays
	// whose body differed from the first create's (a client reusing a key
	// for another file).
	Creates       int
	CreateReplays int
	KeyMismatches int
	// Completes counts completes that created a splat (201, or 502 with
	// UncertainCompletes); CompleteReplays counts completes answered 200
	// because the session was already completed.
	Completes       int
	CompleteReplays int
	// V1Splats counts splats created by v1 completes. With Publishes and
	// Duplicates it answers "one splat per distinct content": PublishesByHash
	// and Sessions tell which content and which Idempotency-Key made each.
	V1Splats int
	// InvalidRequests counts v1 400s by reason (e.g. "unknown field
	// uploadClient.name", "parts: InvalidPart"); the body always says
	// "Invalid request".
	InvalidRequests map[string]int
	// UnknownFields counts v1 requests refused 400 for a field the closed
	// request schema does not name; a correct client keeps it at 0.
	// UnknownFieldNames counts each such field by its path.
	UnknownFields     int
	UnknownFieldNames map[string]int
	// PartURLs counts signed part URLs issued. PartPuts counts part PUTs
	// stored (200), PartBytes their bytes, PartResets the part PUTs whose
	// connection was reset on purpose. (Uploads, UploadBytes and
	// UploadResets count legacy object PUTs only; StorageAuthHeaders counts
	// both.)
	PartURLs   int
	PartPuts   int
	PartBytes  int64
	PartResets int
	// Sessions holds per-session storage counters, by upload id.
	Sessions map[string]SessionStats
	// StorageConns holds the body bytes read and the bandwidth-cap waits of
	// each storage TCP connection, keyed by accept order (1, 2, …).
	StorageConns map[int64]ConnStats
	// FirstBodyByte is when storage first read a request-body byte;
	// LastPartStored when it last stored a v1 part (zero until then).
	FirstBodyByte  time.Time
	LastPartStored time.Time
}

// SessionStats are the storage counters of one v1 session.
type SessionStats struct {
	// PartPuts counts its parts stored (200); PartBytes their bytes.
	PartPuts  int
	PartBytes int64
	// PartsResent counts part PUTs stored for a part number that storage
	// already held: work a resuming client did again.
	PartsResent int
	// BytesReceived counts every body byte storage read for this session,
	// including PUTs that were refused, failed or reset: comparing it with
	// the session's size measures re-sent bytes.
	BytesReceived int64
}

// ConnStats are the counters of one storage TCP connection.
type ConnStats struct {
	// Bytes is the request-body bytes read on the connection.
	Bytes int64
	// Waited is the time the bandwidth cap paused its reads. With a fake
	// Now and a no-op Options.Sleep it is Bytes/R (R the cap) to within
	// 2 ms, which is how tests measure the cap; with the real clock it is
	// less, as the reads themselves take part of that time.
	Waited time.Duration
}

func newStats() Stats {
	return Stats{
		Requests:          map[string]map[int]int{},
		InvalidRequests:   map[string]int{},
		UnknownFieldNames: map[string]int{},
		Sessions:          map[string]SessionStats{},
		StorageConns:      map[int64]ConnStats{},
	}
}

func (st Stats) clone() Stats {
	c := st
	c.Requests = make(map[string]map[int]int, len(st.Requests))
	for r, m := range st.Requests {
		c.Requests[r] = maps.Clone(m)
	}
	c.InvalidRequests = maps.Clone(st.InvalidRequests)
	c.UnknownFieldNames = maps.Clone(st.UnknownFieldNames)
	c.Sessions = maps.Clone(st.Sessions)
	c.StorageConns = maps.Clone(st.StorageConns)
	return c
}

// Count returns the number of answers on route with status code.
func (st Stats) Count(route string, code int) int { return st.Requests[route][code] }

// Total returns the number of answers on route, whatever their status.
func (st Stats) Total(route string) int {
	n := 0
	for _, c := range st.Requests[route] {
		n += c
	}
	return n
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.clone()
}

// ResetStats zeroes the counters (not the splats, objects or windows), for
// a test that measures one phase.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = newStats()
}

// count records one answer. Callers hold s.mu.
func (s *Server) count(route string, code int) {
	m := s.stats.Requests[route]
	if m == nil {
		m = map[int]int{}
		s.stats.Requests[route] = m
	}
	m[code]++
	switch code {
	case 429:
		s.stats.RateLimited++
	case 401:
		s.stats.Unauthorized++
	}
}

// PublishesByHash returns, per sha256 (hex) of a published object, how many
// splats were created from it: the server-side view of duplicates.
func (s *Server) PublishesByHash() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.published)
}

// SplatRecord is the server's view of one splat, with its task status as of
// the call.
type SplatRecord struct {
	ID           string // string form of the (legacy, numeric) id
	Hash         string // viewer hash, which is also the v1 public id
	Protocol     string // "legacy" or "v1"
	UploadID     string // v1: the session that made it
	URL          string // viewer link
	Title        string
	Description  string
	Listed       bool
	Format       string         // the requested output format (v1: the sourceFormat)
	Settings     map[string]any // the settings object as sent (nil if none)
	Key          string         // storage key published (legacy)
	ObjectSHA256 string         // sha256 of the object at publish time (v1 with DiscardObjects: see PartStore)
	Size         int64          // object size
	Status       string         // task.status now
	Message      string         // task.message now
	Uncertain    bool           // publish (complete) answered 5xx although the splat was created
	CreatedAt    time.Time
	CompletedAt  *time.Time // set when Status is terminal
	S3Key        string     // with Options.S3: the object's key in the bucket
}

// Splats returns every splat created, oldest first.
func (s *Server) Splats() []SplatRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]SplatRecord, 0, len(s.splats))
	for _, sp := range s.splats {
		out = append(out, sp.record(now, s.o))
	}
	return out
}

// Splat returns one splat by id (its string form).
func (s *Server) Splat(id string) (SplatRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.splatByID(id)
	if sp == nil {
		return SplatRecord{}, false
	}
	return sp.record(s.now(), s.o), true
}

// Object reports the last completed upload to key: its sha256 (hex) and size.
func (s *Server) Object(key string) (sha256 string, size int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[key]
	if o == nil {
		return "", 0, false
	}
	return o.sha256, o.size, true
}

// Objects returns the keys of all stored objects, sorted.
func (s *Server) Objects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.objects))
}

package apisim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// upload is a v1 upload session. Its status is derived (see status), so no
// goroutine moves it along.
type upload struct {
	id        string
	key       string // Idempotency-Key, "" if none was sent
	req       createRequest
	partSize  int64
	createdAt time.Time
	expiresAt time.Time
	uploading bool // storage has received a part
	canceled  bool
	replays   int
	// completing is non-nil while a complete runs (it is closed when that
	// one ends), so that a concurrent complete waits instead of racing.
	completing chan struct{}
	splat      *splat // set by the complete that created it
	parts      []Part // the completed parts, once storage has assembled them
}

func (u *upload) status(now time.Time) string {
	switch {
	case u.canceled:
		return statusCanceled
	case u.splat != nil && now.Before(u.splat.doneAt):
		return statusProcessing
	case u.splat != nil:
		return statusCompleted
	case u.uploading:
		return statusUploading
	}
	return statusCreated
}

// gone reports a session that expired before it was completed: it answers
// 404 and its Idempotency-Key is free again.
func (u *upload) gone(now time.Time) bool {
	return u.splat == nil && !u.canceled && !now.Before(u.expiresAt)
}

// accepting reports whether parts may still be signed and stored.
func (u *upload) accepting(now time.Time) bool {
	return !u.gone(now) && !u.canceled && u.splat == nil && u.completing == nil
}

// lastPart is N, the number of parts of a session whose size is known
// (at least one, for an empty file), else the schema's maximum.
func (u *upload) lastPart() int {
	if u.req.ContentLength < 0 {
		return maxPartNumber
	}
	return max(1, int((u.req.ContentLength+u.partSize-1)/u.partSize))
}

// handleV1Create creates a session, or answers the one an Idempotency-Key
// already names (200). A session whose key is reused after it expired is
// replaced by a new one.
func (s *Server) handleV1Create(w http.ResponseWriter, r *http.Request, _ string) int {
	key := r.Header.Get("Idempotency-Key")
	if vals := r.Header.Values("Idempotency-Key"); len(vals) > 1 || (len(vals) == 1 && (key == "" || len(key) > 200)) {
		return s.invalid(w, r, invalidf("Idempotency-Key: want one value of 1..200 characters"))
	}
	body, err := decodeV1(r)
	if err != nil {
		return s.invalid(w, r, err)
	}
	req, err := parseCreate(body)
	if err != nil {
		return s.invalid(w, r, err)
	}
	if s.o.MaxUploadSize > 0 && req.ContentLength > s.o.MaxUploadSize {
		return v1Error(w, http.StatusRequestEntityTooLarge)
	}
	if !req.HasTitle {
		req.Title = "Untitled"
	}
	if u := s.replay(key, req); u != nil {
		return s.writeSession(w, r, http.StatusOK, u)
	}

	s.mu.Lock()
	id := fmt.Sprintf("%08x%016x", s.rng.Uint32(), s.rng.Uint64())
	s.mu.Unlock()
	if err := s.parts.Create(r.Context(), id); err != nil {
		s.log.Debug().Err(err).Msg("part store create")
		return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)")
	}

	s.mu.Lock()
	now := s.now()
	// A concurrent create with the same key may have won meanwhile.
	if old := s.byKey[key]; key != "" && old != nil && !old.gone(now) {
		s.mu.Unlock()
		s.parts.Abort(context.WithoutCancel(r.Context()), id)
		if u := s.replay(key, req); u != nil {
			return s.writeSession(w, r, http.StatusOK, u)
		}
		return jsonError(w, http.StatusInternalServerError, "Internal server error (session vanished)")
	}
	u, uncertain := s.addSession(id, key, req, now)
	s.mu.Unlock()
	if uncertain {
		return jsonError(w, http.StatusBadGateway, "Bad gateway (simulated, the session was created)")
	}
	return s.writeSession(w, r, http.StatusCreated, u)
}

// addSession records session id of key and req, created now, and reports
// whether the uncertain-create fault came up; the caller holds s.mu.
func (s *Server) addSession(id, key string, req createRequest, now time.Time) (*upload, bool) {
	u := &upload{
		id:        id,
		key:       key,
		req:       req,
		partSize:  s.partSize(req.ContentLength),
		createdAt: now,
		expiresAt: now.Add(s.o.SessionExpiry),
	}
	s.uploads[id] = u
	if key != "" {
		s.byKey[key] = u
	}
	s.stats.Creates++
	s.stats.Sessions[id] = s.stats.Sessions[id] // listed from the start, even with no part yet
	uncertain := s.take(&s.faults.UncertainCreates, s.faults.UncertainCreateRate)
	if uncertain {
		s.stats.Faults++
	}
	return u, uncertain
}

// replay returns the live session of key, counting the replay, or nil.
func (s *Server) replay(key string, req createRequest) *upload {
	if key == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.byKey[key]
	if u == nil || u.gone(s.now()) {
		return nil
	}
	u.replays++
	s.stats.CreateReplays++
	if !u.req.same(req) {
		s.stats.KeyMismatches++
	}
	return u
}

// partSize is the server's choice for a session: Options.PartSize, or the
// smallest whole number of MiB that keeps the file within 10000 parts.
func (s *Server) partSize(contentLength int64) int64 {
	ps := s.o.PartSize
	if contentLength > ps*maxPartNumber {
		const mib = 1 << 20
		need := (contentLength + maxPartNumber - 1) / maxPartNumber
		ps = (need + mib - 1) / mib * mib
	}
	return ps
}

// lookup finds a live session (not expired); callers hold s.mu.
func (s *Server) lookup(id string) *upload {
	u := s.uploads[id]
	if u == nil || u.gone(s.now()) {
		return nil
	}
	return u
}

func (s *Server) handleV1GetUpload(w http.ResponseWriter, r *http.Request, id string) int {
	if len(id) > 200 {
		return s.invalid(w, r, invalidf("uploadId: longer than 200"))
	}
	s.mu.Lock()
	u := s.uploads[id]
	expired := u != nil && u.gone(s.now())
	s.mu.Unlock()
	if u == nil || expired {
		if expired {
			// Storage forgets an expired session's parts, as S3's
			// lifecycle rule for incomplete uploads does.
			s.parts.Abort(context.WithoutCancel(r.Context()), id)
		}
		return v1Error(w, http.StatusNotFound)
	}
	return s.writeSession(w, r, http.StatusOK, u)
}

// writeSession answers u as docs/api-v1.md's UploadSession, with the parts
// storage holds (or, once completed, the parts it was completed with).
func (s *Server) writeSession(w http.ResponseWriter, r *http.Request, code int, u *upload) int {
	s.mu.Lock()
	parts := u.parts
	live := u.splat == nil && !u.canceled
	s.mu.Unlock()
	if live {
		var err error
		parts, err = s.parts.ListParts(r.Context(), u.id)
		if err != nil && !errors.Is(err, ErrNoSuchUpload) {
			s.log.Debug().Err(err).Msg("part store list")
			return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(parts) > 0 && live {
		u.uploading = true // a store other than the built-in one tells only this way
	}
	now := s.now()
	uploaded := make([]map[string]any, 0, len(parts))
	for _, p := range parts {
		item := map[string]any{"partNumber": p.Number, "etag": p.ETag}
		if s.o.SessionPartSizes {
			item["size"] = p.Size
		}
		uploaded = append(uploaded, item)
	}
	var contentLength any
	if u.req.ContentLength >= 0 {
		contentLength = u.req.ContentLength
	}
	// Only the fields the schema's UploadSession names.
	m := map[string]any{
		"id":            u.id,
		"status":        u.status(now),
		"contentLength": contentLength,
		"partSize":      u.partSize,
		"uploadedParts": uploaded,
		"expiresAt":     isoTime(u.expiresAt),
	}
	if u.splat != nil && s.o.SessionSplatID {
		m["splatId"] = u.splat.hash
	}
	return writeJSON(w, code, m)
}

func (s *Server) handleV1PartURLs(w http.ResponseWriter, r *http.Request, id string) int {
	if len(id) > 200 {
		return s.invalid(w, r, invalidf("uploadId: longer than 200"))
	}
	body, err := decodeV1(r)
	if err != nil {
		return s.invalid(w, r, err)
	}
	nums, err := parsePartNumbers(body)
	if err != nil {
		return s.invalid(w, r, err)
	}
	s.mu.Lock()
	u := s.lookup(id)
	var ok bool
	var last int
	var partSize int64
	if u != nil {
		ok, last, partSize = u.accepting(s.now()), u.lastPart(), u.partSize
	}
	expires := s.now().Add(s.o.URLExpiry)
	s.mu.Unlock()
	switch {
	case u == nil:
		return v1Error(w, http.StatusNotFound)
	case !ok:
		return v1Error(w, http.StatusConflict)
	}
	if n := slices.Max(nums); n > last {
		return s.invalid(w, r, invalidf("parts: %d beyond the session's %d parts", n, last))
	}
	urls := make([]map[string]any, 0, len(nums))
	for _, n := range nums {
		var link string
		var err error
		if s.s3 != nil {
			// S3 decides expiry itself: the fault must hand out a URL
			// that is expired already, where the built-in store refuses
			// at the PUT.
			s.mu.Lock()
			fault := s.urlFault(&s.faults.ExpiredPartURLs)
			s.mu.Unlock()
			link, err = s.s3.signPart(r.Context(), id, n, expires, fault)
		} else {
			link, err = s.parts.SignPart(r.Context(), id, n, expires)
		}
		if err != nil {
			s.log.Debug().Err(err).Msg("part store sign")
			return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)")
		}
		urls = append(urls, map[string]any{"partNumber": n, "url": link, "expiresAt": isoTime(expires)})
	}
	s.bump(func(st *Stats) { st.PartURLs += len(urls) })
	return writeJSON(w, http.StatusOK, map[string]any{"uploadId": id, "partSize": partSize, "urls": urls})
}

// CancelUpload cancels a session that is not completed: GET shows it
// "canceled", part URLs and complete answer 409, storage forgets its parts
// and its Idempotency-Key keeps naming it. It reports whether there was
// such a session.
func (s *Server) CancelUpload(id string) bool {
	s.mu.Lock()
	u := s.lookup(id)
	ok := u != nil && u.splat == nil && !u.canceled
	if ok {
		u.canceled = true
	}
	s.mu.Unlock()
	if ok {
		s.parts.Abort(context.Background(), id)
	}
	return ok
}

// ExpireUpload makes a session that is not completed expire now: it
// answers 404 from then on, storage forgets its parts, and its
// Idempotency-Key makes a new session. It reports whether there was such a
// session.
func (s *Server) ExpireUpload(id string) bool {
	s.mu.Lock()
	u := s.lookup(id)
	ok := u != nil && u.splat == nil
	if ok {
		u.expiresAt = s.now()
		u.canceled = false
	}
	s.mu.Unlock()
	if ok {
		s.parts.Abort(context.Background(), id)
	}
	return ok
}

// SessionRecord is the server's view of one v1 session.
type SessionRecord struct {
	ID             string
	IdempotencyKey string
	Status         string // as GET would answer now; "expired" once gone
	SourceFormat   string
	ContentLength  int64 // -1 if the create gave none
	PartSize       int64
	Title          string
	Description    string
	ClientID       string // uploadClient.id
	ClientVersion  string
	SoftwareTools  []string
	Replays        int    // creates answered with this session again
	SplatID        string // set by complete
	CreatedAt      time.Time
	ExpiresAt      time.Time
}

// Sessions returns every v1 session, oldest first.
func (s *Server) Sessions() []SessionRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]SessionRecord, 0, len(s.uploads))
	for _, u := range s.uploads {
		out = append(out, u.record(now))
	}
	slices.SortFunc(out, func(a, b SessionRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Session returns one v1 session by id (expired ones included).
func (s *Server) Session(id string) (SessionRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uploads[id]
	if u == nil {
		return SessionRecord{}, false
	}
	return u.record(s.now()), true
}

func (u *upload) record(now time.Time) SessionRecord {
	rec := SessionRecord{
		ID: u.id, IdempotencyKey: u.key, Status: u.status(now), SourceFormat: u.req.SourceFormat,
		ContentLength: u.req.ContentLength, PartSize: u.partSize, Title: u.req.Title,
		Description: u.req.Description, ClientID: u.req.ClientID, ClientVersion: u.req.ClientVersion,
		SoftwareTools: slices.Clone(u.req.SoftwareTools), Replays: u.replays,
		CreatedAt: u.createdAt, ExpiresAt: u.expiresAt,
	}
	if u.gone(now) {
		rec.Status = "expired"
	}
	if u.splat != nil {
		rec.SplatID = u.splat.hash
	}
	return rec
}

package apisim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// v1Prefix is where the SuperSplat API v1 routes live (docs/api-v1.md).
const v1Prefix = "/api/supersplat/v1/"

// v1Messages are docs/api-v1.md's documented error messages; every non-2xx v1
// answer carries one of them (5xx faults excepted).
var v1Messages = map[int]string{
	http.StatusBadRequest:            "Invalid request",
	http.StatusUnauthorized:          "Unauthorized",
	http.StatusForbidden:             "Forbidden",
	http.StatusNotFound:              "Resource not found",
	http.StatusConflict:              "Invalid upload state",
	http.StatusRequestEntityTooLarge: "Upload size limit exceeded",
	http.StatusTooManyRequests:       "Too many requests",
}

func v1Error(w http.ResponseWriter, code int) int {
	return jsonError(w, code, v1Messages[code])
}

// Session statuses of docs/api-v1.md.
const (
	statusCreated    = "created"
	statusUploading  = "uploading"
	statusProcessing = "processing"
	statusCompleted  = "completed"
	statusCanceled   = "canceled"
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

// matchV1 finds the v1 route of the path below v1Prefix.
func (s *Server) matchV1(rest string) (apiRoute, string, bool) {
	seg := strings.Split(rest, "/")
	switch {
	case rest == "me":
		return apiRoute{RouteV1Me, http.MethodGet, s.handleV1Me, true}, "", true
	case rest == "splats":
		return apiRoute{RouteV1ListSplats, http.MethodGet, s.handleV1ListSplats, true}, "", true
	case rest == "splats/uploads":
		return apiRoute{RouteV1CreateUpload, http.MethodPost, s.handleV1Create, true}, "", true
	case len(seg) == 2 && seg[0] == "splats" && seg[1] != "":
		return apiRoute{RouteV1GetSplat, http.MethodGet, s.handleV1GetSplat, true}, seg[1], true
	case len(seg) == 3 && seg[0] == "splats" && seg[1] == "uploads" && seg[2] != "":
		return apiRoute{RouteV1GetUpload, http.MethodGet, s.handleV1GetUpload, true}, seg[2], true
	case len(seg) == 4 && seg[0] == "splats" && seg[1] == "uploads" && seg[2] != "" && seg[3] == "part-upload-urls":
		return apiRoute{RouteV1PartURLs, http.MethodPost, s.handleV1PartURLs, true}, seg[2], true
	case len(seg) == 4 && seg[0] == "splats" && seg[1] == "uploads" && seg[2] != "" && seg[3] == "complete":
		return apiRoute{RouteV1Complete, http.MethodPost, s.handleV1Complete, true}, seg[2], true
	}
	return apiRoute{name: RouteOther, v1: true}, "", false
}

// invalid answers 400 "Invalid request" and counts why.
func (s *Server) invalid(w http.ResponseWriter, r *http.Request, err error) int {
	var br *badRequest
	if !errors.As(err, &br) {
		br = &badRequest{reason: err.Error()}
	}
	s.mu.Lock()
	s.stats.InvalidRequests[br.reason]++
	if len(br.unknown) > 0 {
		s.stats.UnknownFields++
		for _, f := range br.unknown {
			s.stats.UnknownFieldNames[f]++
		}
	}
	s.mu.Unlock()
	s.log.Debug().Str("path", r.URL.Path).Str("reason", br.reason).Msg("invalid request")
	return v1Error(w, http.StatusBadRequest)
}

func (s *Server) handleV1Me(w http.ResponseWriter, _ *http.Request, _ string) int {
	var username any = s.o.Username
	if s.o.NullUsername {
		username = nil
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": strconv.FormatInt(s.o.UserID, 10), "username": username})
}

// queryInt reads an optional integer query parameter within lo..hi.
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(q.Get(name))
	if err != nil || n < lo || n > hi {
		return 0, invalidf("query %s=%q: want an integer in %d..%d", name, q.Get(name), lo, hi)
	}
	return n, nil
}

// handleV1ListSplats lists every splat of the account, legacy publishes
// included, newest first, by offset.
func (s *Server) handleV1ListSplats(w http.ResponseWriter, r *http.Request, _ string) int {
	limit, err := queryInt(r, "limit", 50, 1, 128)
	if err != nil {
		return s.invalid(w, r, err)
	}
	skip, err := queryInt(r, "skip", 0, 0, 100000)
	if err != nil {
		return s.invalid(w, r, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	data := make([]map[string]any, 0, limit)
	for i := len(s.splats) - 1 - skip; i >= 0 && len(data) < limit; i-- {
		data = append(data, s.splats[i].v1JSON(now, s.o))
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"data":       data,
		"pagination": map[string]int{"skip": skip, "limit": limit, "total": len(s.splats)},
	})
}

func (s *Server) handleV1GetSplat(w http.ResponseWriter, r *http.Request, id string) int {
	if len(id) > 100 {
		return s.invalid(w, r, invalidf("splatId: longer than 100"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.byHash[id]
	if sp == nil {
		return v1Error(w, http.StatusNotFound)
	}
	return writeJSON(w, http.StatusOK, sp.v1JSON(s.now(), s.o))
}

// v1JSON renders a splat as docs/api-v1.md's Splat: its fields only (no
// editUrl, which only complete's answer has).
func (sp *splat) v1JSON(now time.Time, o Options) map[string]any {
	status, _, done := sp.state(now, o)
	var format, completedAt any
	var size int64
	updated := sp.createdAt
	switch {
	case done == nil:
		status = "processing"
	case sp.failMsg != "":
		status = "failed"
		updated = *done
	default:
		status = "completed"
		updated = *done
		format, size, completedAt = sp.format, sp.size, isoTime(*done)
	}
	visibility := "unlisted"
	if sp.listed {
		visibility = "listed"
	}
	return map[string]any{
		"id":          sp.hash,
		"title":       sp.title,
		"description": sp.description,
		"status":      status,
		"visibility":  visibility,
		"format":      format,
		"size":        size,
		"viewerUrl":   o.ViewerURL + "/scene/" + sp.hash,
		"createdAt":   isoTime(sp.createdAt),
		"updatedAt":   isoTime(updated),
		"completedAt": completedAt,
	}
}

func editURL(o Options, id string) string { return o.ViewerURL + "/scene/" + id + "/edit" }

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
	s.mu.Unlock()
	if uncertain {
		return jsonError(w, http.StatusBadGateway, "Bad gateway (simulated, the session was created)")
	}
	return s.writeSession(w, r, http.StatusCreated, u)
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

// handleV1Complete checks the client's parts against what storage holds,
// has storage assemble them and creates the splat. A repeat answers 200
// with the same body; a concurrent one waits for the first.
func (s *Server) handleV1Complete(w http.ResponseWriter, r *http.Request, id string) int {
	if len(id) > 200 {
		return s.invalid(w, r, invalidf("uploadId: longer than 200"))
	}
	body, err := decodeV1(r)
	if err != nil {
		return s.invalid(w, r, err)
	}
	sent, err := parseCompleteParts(body)
	if err != nil {
		return s.invalid(w, r, err)
	}

	var u *upload
	for {
		s.mu.Lock()
		u = s.lookup(id)
		switch {
		case u == nil:
			s.mu.Unlock()
			return v1Error(w, http.StatusNotFound)
		case u.splat != nil:
			s.stats.CompleteReplays++
			sp := u.splat
			s.mu.Unlock()
			return writeCompleted(w, http.StatusOK, id, sp, s.o)
		case u.canceled:
			s.mu.Unlock()
			return v1Error(w, http.StatusConflict)
		case u.completing != nil:
			wait := u.completing
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-r.Context().Done():
				return 499
			}
		}
		u.completing = make(chan struct{})
		s.mu.Unlock()
		break
	}
	code, sp, uncertain := s.complete(w, r, u, sent)
	if sp == nil {
		return code
	}
	if uncertain {
		return jsonError(w, http.StatusBadGateway, "Bad gateway (simulated, the splat was created)")
	}
	return writeCompleted(w, http.StatusCreated, id, sp, s.o)
}

// complete runs one complete of u, which the caller marked completing. It
// returns the splat it created, or the error status it answered.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, u *upload, sent []Part) (code int, sp *splat, uncertain bool) {
	defer func() {
		s.mu.Lock()
		close(u.completing)
		u.completing = nil
		s.mu.Unlock()
	}()
	ctx := r.Context()
	held, err := s.parts.ListParts(ctx, u.id)
	if err != nil {
		if errors.Is(err, ErrNoSuchUpload) {
			return v1Error(w, http.StatusNotFound), nil, false
		}
		return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)"), nil, false
	}
	parts, total, err := checkParts(sent, held, u.partSize, u.lastPart(), u.req.ContentLength)
	if s.o.MaxUploadSize > 0 && total > s.o.MaxUploadSize {
		return v1Error(w, http.StatusRequestEntityTooLarge), nil, false
	}
	if err != nil {
		return s.invalid(w, r, err), nil, false
	}
	obj, err := s.parts.Complete(ctx, u.id, parts)
	switch {
	case errors.Is(err, ErrInvalidPart):
		return s.invalid(w, r, invalidf("parts: InvalidPart: %v", err)), nil, false
	case errors.Is(err, ErrNoSuchUpload):
		return v1Error(w, http.StatusNotFound), nil, false
	case err != nil:
		s.log.Debug().Err(err).Msg("part store complete")
		return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)"), nil, false
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	sp = &splat{
		id:          len(s.splats) + 1,
		hash:        s.newHash(),
		title:       u.req.Title,
		description: u.req.Description,
		format:      u.req.SourceFormat,
		sha256:      obj.Hash,
		size:        obj.Size,
		createdAt:   now,
		doneAt:      now.Add(s.o.ProcessingDelay),
		uploadID:    u.id,
	}
	if s.s3 != nil {
		sp.s3Key = s.s3.sessionKey(u.id)
	}
	switch {
	case !matchesSourceFormat(sp.format, obj.Head):
		sp.failMsg = fmt.Sprintf("processing failed: the file is not %s (its sourceFormat)", strings.ToUpper(sp.format))
	case s.roll(s.faults.ProcessingFailRate):
		sp.failMsg = "processing failed: conversion error (simulated)"
	}
	s.splats = append(s.splats, sp)
	s.byHash[sp.hash] = sp
	if s.published[sp.sha256] > 0 {
		s.stats.Duplicates++
	}
	s.published[sp.sha256]++
	s.pubBytes += sp.size
	u.splat, u.parts = sp, parts
	s.stats.Completes++
	s.stats.V1Splats++
	if s.take(&s.faults.UncertainCompletes, s.faults.UncertainCompleteRate) {
		s.stats.Faults++
		sp.uncertain = true
		return http.StatusBadGateway, sp, true
	}
	return http.StatusCreated, sp, false
}

// checkParts matches the client's list against the parts storage holds: all
// of 1..N in ascending order, each with the ETag storage gave, every part
// but the last of exactly partSize bytes, adding up to contentLength (when
// the create gave one; else N is the client's last part). It returns the
// parts with their sizes and their total, which is meaningful even with an
// error about sizes (for the 413 check).
func checkParts(sent, held []Part, partSize int64, last int, contentLength int64) ([]Part, int64, error) {
	byNum := make(map[int]Part, len(held))
	for _, p := range held {
		byNum[p.Number] = p
	}
	if contentLength < 0 {
		last = sent[len(sent)-1].Number
	}
	out := make([]Part, 0, len(sent))
	var total int64
	for i, p := range sent {
		if i > 0 && p.Number <= sent[i-1].Number {
			return nil, 0, invalidf("parts: InvalidPartOrder")
		}
		if p.Number != i+1 {
			return nil, 0, invalidf("parts: part %d missing", i+1)
		}
		h, ok := byNum[p.Number]
		if !ok {
			return nil, 0, invalidf("parts: InvalidPart: storage has no part %d", p.Number)
		}
		if h.ETag != p.ETag {
			return nil, 0, invalidf("parts: InvalidPart: part %d ETag %s is not storage's (quotes included)", p.Number, p.ETag)
		}
		out = append(out, h)
		total += h.Size
	}
	switch {
	case len(sent) < last:
		return nil, total, invalidf("parts: %d of %d parts", len(sent), last)
	case len(sent) > last:
		return nil, total, invalidf("parts: %d parts, the session has %d", len(sent), last)
	}
	for i, p := range out {
		if i < len(out)-1 && p.Size != partSize {
			return nil, total, invalidf("parts: EntityTooSmall: part %d has %d bytes, partSize is %d", p.Number, p.Size, partSize)
		}
		if p.Size > partSize {
			return nil, total, invalidf("parts: part %d has %d bytes, more than partSize %d", p.Number, p.Size, partSize)
		}
	}
	if contentLength >= 0 && total != contentLength {
		return nil, total, invalidf("parts: %d bytes, contentLength is %d", total, contentLength)
	}
	return out, total, nil
}

func writeCompleted(w http.ResponseWriter, code int, uploadID string, sp *splat, o Options) int {
	w.Header().Set("Location", v1Prefix+"splats/"+sp.hash)
	return writeJSON(w, code, map[string]any{
		"uploadId": uploadID,
		"status":   statusCompleted,
		"splatId":  sp.hash,
		"editUrl":  editURL(o, sp.hash),
	})
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

package apisim

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxJSONBody caps request bodies of the API routes.
const maxJSONBody = 1 << 20

// apiRoute is one known path shape of the API.
type apiRoute struct {
	name   string
	method string
	serve  func(w http.ResponseWriter, r *http.Request, param string) int
	v1     bool // answers with docs/api-v1.md's error messages
}

// Handler serves the API routes. Every answer passes through the same gate:
// latency fault, bearer check (401), rate limit (headers always, 429 over
// the limit), method check (405), error-rate fault (5xx), then the route.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveAPI) }

// match finds the route of a path; param is the {branchId} or {id} part.
func (s *Server) match(path string) (rt apiRoute, param string, ok bool) {
	switch {
	case path == "/api/upload/signed-url":
		return apiRoute{RouteSignedURL, http.MethodPost, s.handleSignedURL, false}, "", true
	case path == "/api/splats/publish":
		return apiRoute{RoutePublish, http.MethodPost, s.handlePublish, false}, "", true
	case strings.HasPrefix(path, "/api/splats/"):
		id := strings.TrimPrefix(path, "/api/splats/")
		if id != "" && !strings.Contains(id, "/") {
			return apiRoute{RouteGetSplat, http.MethodGet, s.handleGetSplat, false}, id, true
		}
	case strings.HasPrefix(path, v1Prefix):
		return s.matchV1(strings.TrimPrefix(path, v1Prefix))
	case path == "/api/supersplat" || strings.HasPrefix(path, "/api/supersplat/"):
		return apiRoute{name: RouteOther, v1: true}, "", false
	case strings.HasPrefix(path, "/api/branches/"):
		rest := strings.TrimPrefix(path, "/api/branches/")
		if b, ok := strings.CutSuffix(rest, "/checkpoints"); ok && b != "" && !strings.Contains(b, "/") {
			return apiRoute{RouteCheckpoints, http.MethodGet, s.handleCheckpoints, false}, b, true
		}
	}
	return apiRoute{name: RouteOther}, "", false
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if isViewerPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		code := s.handleView(w, r)
		s.finish(w, r, RouteOther, code)
		return
	}
	rt, param, known := s.match(r.URL.Path)
	code := s.gate(w, r, rt, param, known)
	s.finish(w, r, rt.name, code)
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, route string, code int) {
	s.mu.Lock()
	s.count(route, code)
	s.mu.Unlock()
	s.log.Debug().Str("route", route).Str("method", r.Method).Str("path", r.URL.Path).Int("status", code).
		Str("remaining", w.Header().Get("X-RateLimit-Remaining")).Msg("api request")
}

func (s *Server) gate(w http.ResponseWriter, r *http.Request, rt apiRoute, param string, known bool) int {
	s.mu.Lock()
	f := s.faults
	s.mu.Unlock()
	if !sleepCtx(r, f.Latency) {
		return 499
	}

	token, hasBearer := bearer(r)
	class := s.o.Classes[rt.name]
	if class == "" {
		class = ClassNormal
	}

	s.mu.Lock()
	authorized := hasBearer && s.tokens[token]
	now := s.now()
	var q quota
	if authorized {
		q = s.limiter.take(now, bucketKey{token, class}, f.Neighbour[class], f.Force429, true)
	} else {
		// Unauthenticated callers share one anonymous window; it is
		// reported but not charged, and the 401 wins over a 429.
		q = s.limiter.take(now, bucketKey{"", class}, 0, false, false)
	}
	fail := authorized && q.ok && known && r.Method == rt.method && (s.takeError(rt.name) || s.roll(f.ErrorRate[rt.name]))
	if fail {
		s.stats.Faults++
	}
	s.mu.Unlock()

	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(q.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(q.remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(q.reset.Unix(), 10))
	if fail && f.ErrorRetryAfter != "" {
		h.Set("Retry-After", f.ErrorRetryAfter)
	}

	switch {
	case !authorized:
		return jsonError(w, http.StatusUnauthorized, "Unauthorized")
	case !q.ok:
		wait := q.reset.Sub(now)
		h.Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10))
		return jsonError(w, http.StatusTooManyRequests, "Too many requests")
	case !known && rt.v1:
		return v1Error(w, http.StatusNotFound)
	case !known:
		return jsonError(w, http.StatusNotFound, "Not found")
	case r.Method != rt.method:
		h.Set("Allow", rt.method)
		return jsonError(w, http.StatusMethodNotAllowed, "Method not allowed")
	case fail && rt.v1 && v1Messages[f.errorStatus()] != "":
		return v1Error(w, f.errorStatus())
	case fail:
		return jsonError(w, f.errorStatus(), "Internal server error (simulated)")
	}
	return rt.serve(w, r, param)
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// jsonError answers {"error": msg}, the error shape of docs/api-legacy.md.
func jsonError(w http.ResponseWriter, code int, msg string) int {
	return writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":"encoding response"}`)
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
	return code
}

// decodeJSON reads a JSON object body and returns its fields by their
// exact names (encoding/json would match "filename" to fileName, hiding a
// client that uses the wrong spelling). The error text is what the 400
// answer says.
func decodeJSON(r *http.Request) (jsonObject, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, errors.New("Content-Type must be application/json")
	}
	var m jsonObject
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	if m == nil {
		return nil, errors.New("invalid JSON body: want an object")
	}
	return m, nil
}

// jsonObject is a decoded request body, field by exact name.
type jsonObject map[string]json.RawMessage

// get decodes field name into v if present and not null; present reports
// whether it was; the error names the field.
func (m jsonObject) get(name string, v any) (present bool, err error) {
	raw, ok := m[name]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("invalid JSON body: field %s: %v", name, err)
	}
	return true, nil
}

func (s *Server) handleSignedURL(w http.ResponseWriter, r *http.Request, _ string) int {
	body, err := decodeJSON(r)
	var name string
	if err == nil {
		_, err = body.get("fileName", &name)
	}
	if err != nil {
		return jsonError(w, http.StatusBadRequest, err.Error())
	}
	if strings.TrimSpace(name) == "" {
		return jsonError(w, http.StatusBadRequest, "fileName is required")
	}
	u, key, err := s.signURL(r.Context(), name)
	if err != nil {
		s.log.Debug().Err(err).Msg("sign")
		return jsonError(w, http.StatusInternalServerError, "Internal server error (storage)")
	}
	return writeJSON(w, http.StatusOK, map[string]string{"signedUrl": u, s.o.KeyField: key})
}

var validFormats = map[string]bool{"sog": true, "compressed.ply": true}

// publishRequest is a decoded legacy publish body.
type publishRequest struct {
	key, title, description, format string
	listed                          bool
	settings                        map[string]any
	// mismatch: the key came under the other name than the signed-URL
	// answer used (accepted, counted).
	mismatch bool
}

// decodePublish reads a publish body as the API would: the key under
// either name, the documented fields with their types, format sog by
// default. It returns the 400 message on a bad body.
func (s *Server) decodePublish(r *http.Request) (publishRequest, string) {
	var req publishRequest
	body, err := decodeJSON(r)
	if err != nil {
		return req, err.Error()
	}
	otherField := KeyFieldS3Key
	if s.o.KeyField == KeyFieldS3Key {
		otherField = KeyFieldStorageKey
	}
	sent, err := body.get(s.o.KeyField, &req.key)
	if err == nil && !sent {
		req.mismatch, err = body.get(otherField, &req.key)
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"title", &req.title}, {"description", &req.description}, {"listed", &req.listed}, {"format", &req.format}} {
		if err == nil {
			_, err = body.get(f.name, f.v)
		}
	}
	if err != nil {
		return req, err.Error()
	}
	if _, err := body.get("settings", &req.settings); err != nil {
		return req, "settings must be an object"
	}
	if req.key == "" {
		return req, s.o.KeyField + " is required"
	}
	if req.format == "" {
		req.format = "sog"
	}
	if !validFormats[req.format] {
		return req, fmt.Sprintf("invalid format %q: must be sog or compressed.ply", req.format)
	}
	return req, ""
}

func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request, _ string) int {
	req, bad := s.decodePublish(r)
	if bad != "" {
		return jsonError(w, http.StatusBadRequest, bad)
	}
	key := req.key
	if s.s3 != nil {
		if code := s.fetchObject(w, r, key); code != 0 {
			return code
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if req.mismatch {
		s.stats.KeyFieldMismatches++
	}
	if _, ok := s.issued[key]; !ok {
		return jsonError(w, http.StatusBadRequest, "invalid "+s.o.KeyField)
	}
	obj := s.objects[key]
	if obj == nil {
		return jsonError(w, http.StatusBadRequest, "file not found in storage")
	}
	if s.o.StorageLimit > 0 && s.pubBytes+obj.size > s.o.StorageLimit {
		return jsonError(w, http.StatusBadRequest, "storage limit exceeded")
	}
	now := s.now()
	sp := s.newLegacySplat(req, obj, now)
	if s.faults.UncertainPublishes > 0 {
		s.faults.UncertainPublishes--
		s.stats.Faults++
		sp.uncertain = true
		return jsonError(w, http.StatusInternalServerError, "Internal server error (simulated, splat was created)")
	}
	return writeJSON(w, http.StatusCreated, sp.json(now, s.o, true))
}

// newLegacySplat records the splat a publish of obj creates (under s.mu).
func (s *Server) newLegacySplat(req publishRequest, obj *object, now time.Time) *splat {
	sp := &splat{
		id:          len(s.splats) + 1,
		hash:        s.newHash(),
		title:       req.title,
		description: req.description,
		listed:      req.listed,
		format:      req.format,
		settings:    req.settings,
		key:         req.key,
		sha256:      obj.sha256,
		size:        obj.size,
		createdAt:   now,
		doneAt:      now.Add(s.o.ProcessingDelay),
	}
	if s.s3 != nil {
		sp.s3Key = s.s3.objectKey(req.key)
	}
	switch {
	case !isSplatContent(obj.head):
		sp.failMsg = "processing failed: unsupported file format (expected PLY or SOG)"
	case s.roll(s.faults.ProcessingFailRate):
		sp.failMsg = "processing failed: conversion error (simulated)"
	}
	s.splats = append(s.splats, sp)
	s.byHash[sp.hash] = sp
	if s.published[sp.sha256] > 0 {
		s.stats.Duplicates++
	}
	s.published[sp.sha256]++
	s.pubBytes += obj.size
	s.stats.Publishes++
	return sp
}

// fetchObject reads an issued key's object back from S3 (S3 mode) and
// records it as the simulator's own storage would have at the PUT, so that
// the publish sees its size, sha256 and first bytes. It answers (and
// returns the status) only when S3 cannot be read.
func (s *Server) fetchObject(w http.ResponseWriter, r *http.Request, key string) int {
	s.mu.Lock()
	_, issued := s.issued[key]
	s.mu.Unlock()
	if !issued {
		return 0 // the publish answers "invalid key"
	}
	obj, err := s.s3.readObject(r.Context(), key)
	if err != nil {
		s.log.Debug().Err(err).Str("key", key).Msg("read back from S3")
		return jsonError(w, http.StatusInternalServerError, "Internal server error (storage)")
	}
	if obj != nil {
		s.mu.Lock()
		s.objects[key] = obj
		s.mu.Unlock()
	}
	return 0
}

// isSplatContent is the simulator's processing check: a PLY starts with
// "ply\n", a SOG is a ZIP archive.
func isSplatContent(head []byte) bool {
	return strings.HasPrefix(string(head), "ply\n") || strings.HasPrefix(string(head), "PK\x03\x04")
}

// matchesSourceFormat is the v1 processing check: the object's first bytes
// are those of its sourceFormat (a PLY header, a ZIP for SOG, gzip or NGSP
// for SPZ). ssog and lcc, which the simulator does not model, pass.
func matchesSourceFormat(format string, head []byte) bool {
	h := string(head)
	switch format {
	case "ply":
		return strings.HasPrefix(h, "ply\n") || strings.HasPrefix(h, "ply\r\n")
	case "sog":
		return strings.HasPrefix(h, "PK\x03\x04")
	case "spz":
		return strings.HasPrefix(h, "\x1f\x8b") || strings.HasPrefix(h, "NGSP")
	}
	return true
}

// newHash returns an unused viewer hash. Callers hold s.mu.
func (s *Server) newHash() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for {
		b := make([]byte, 8)
		for i := range b {
			b[i] = alphabet[s.rng.IntN(len(alphabet))]
		}
		if s.byHash[string(b)] == nil {
			return string(b)
		}
	}
}

func (s *Server) handleGetSplat(w http.ResponseWriter, r *http.Request, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.splatByID(id)
	if sp == nil {
		return jsonError(w, http.StatusNotFound, "splat not found")
	}
	return writeJSON(w, http.StatusOK, sp.json(s.now(), s.o, false))
}

// splatByID finds a splat by the string form of its id. Callers hold s.mu.
func (s *Server) splatByID(id string) *splat {
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 || n > len(s.splats) || strconv.Itoa(n) != id {
		return nil
	}
	return s.splats[n-1]
}

// isViewerPath tells the viewer pages: /view?id=<hash> (legacy links),
// /scene/<id> and /scene/<id>/edit (v1 links).
func isViewerPath(p string) bool {
	return p == "/view" || strings.HasPrefix(p, "/scene/")
}

// handleView is the viewer page the splat URLs point at by default, so the
// demo's links lead somewhere. It needs no token, like a public viewer.
func (s *Server) handleView(w http.ResponseWriter, r *http.Request) int {
	hash := r.URL.Query().Get("id")
	if rest, ok := strings.CutPrefix(r.URL.Path, "/scene/"); ok {
		hash = strings.TrimSuffix(rest, "/edit")
	}
	s.mu.Lock()
	sp := s.byHash[hash]
	var rec SplatRecord
	if sp != nil {
		rec = sp.record(s.now(), s.o)
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if sp == nil {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "<!doctype html><title>not found</title><p>No such splat.</p>\n")
		return http.StatusNotFound
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><p>%s</p><p>format %s, %d bytes, status %s</p><p>sha256 %s</p>\n",
		html.EscapeString(rec.Title), html.EscapeString(rec.Title), html.EscapeString(rec.Description),
		html.EscapeString(rec.Format), rec.Size, html.EscapeString(rec.Status), rec.ObjectSHA256)
	return http.StatusOK
}

// splat is the stored record. Its task status is derived from the clock
// (running until doneAt), so no goroutine is needed to advance it.
type splat struct {
	id          int
	hash        string
	title       string
	description string
	listed      bool
	format      string
	settings    map[string]any
	key         string
	sha256      string
	size        int64
	createdAt   time.Time
	doneAt      time.Time
	failMsg     string // non-empty: processing ends "failed" with it
	uncertain   bool
	uploadID    string // v1: the session that made it; "" for a legacy publish
	s3Key       string // the object's key in the bucket, with Options.S3
}

// viewerURL is the link of the record: a v1 splat's viewerUrl, else the
// legacy url.
func (sp *splat) viewerURL(o Options) string {
	if sp.uploadID != "" {
		return o.ViewerURL + "/scene/" + sp.hash
	}
	return o.ViewerURL + "/view?id=" + sp.hash
}

func (sp *splat) protocol() string {
	if sp.uploadID != "" {
		return "v1"
	}
	return "legacy"
}

func (sp *splat) idString() string { return strconv.Itoa(sp.id) }

// state returns task status and message, and the completion time if terminal.
func (sp *splat) state(now time.Time, o Options) (status, msg string, done *time.Time) {
	if now.Before(sp.doneAt) {
		return "running", "", nil
	}
	t := sp.doneAt
	if sp.failMsg != "" {
		return "failed", sp.failMsg, &t
	}
	return o.SuccessStatus, "", &t
}

func (sp *splat) record(now time.Time, o Options) SplatRecord {
	status, msg, done := sp.state(now, o)
	return SplatRecord{
		ID: sp.idString(), Hash: sp.hash, Protocol: sp.protocol(), UploadID: sp.uploadID, URL: sp.viewerURL(o),
		Title: sp.title, Description: sp.description, Listed: sp.listed, Format: sp.format,
		Settings: sp.settings, Key: sp.key, ObjectSHA256: sp.sha256, Size: sp.size,
		Status: status, Message: msg, Uncertain: sp.uncertain, CreatedAt: sp.createdAt, CompletedAt: done,
		S3Key: sp.s3Key,
	}
}

// json renders the record with the field shapes of docs/api-legacy.md's Splat
// table (or the AltFields spellings).
//
// The publish answer (created=true) always says "running", even with no
// processing delay, as docs/api-legacy.md observes.
func (sp *splat) json(now time.Time, o Options, created bool) map[string]any {
	status, msg, done := sp.state(now, o)
	if created {
		status, msg, done = "running", "", nil
	}
	var id any = sp.idString()
	if o.NumericIDs {
		id = sp.id
	}
	format, size, version, thumbs := "", int64(0), 0, false
	var completedAt any // JSON null while running or failed
	modified := sp.createdAt
	if done != nil {
		modified = *done
		if sp.failMsg == "" {
			format, size, version, thumbs = sp.format, sp.size, 1, true
			completedAt = isoTime(*done)
		}
	}
	m := map[string]any{
		"id":             id,
		"hash":           sp.hash,
		"title":          sp.title,
		"description":    sp.description,
		"format":         format,
		"currentVersion": 1,
		"size":           size,
		"views":          0,
		"comments":       0,
		"starred":        0,
		"featuredWeight": 0,
		"listed":         sp.listed,
		"tags":           []string{},
		"task":           map[string]string{"status": status, "message": msg},
		"url":            o.ViewerURL + "/view?id=" + sp.hash,
		"userId":         o.UserID,
		"completedAt":    completedAt,
		"createdAt":      isoTime(sp.createdAt),
		"modifiedAt":     isoTime(modified),
	}
	if o.AltFields {
		m["version"] = strconv.Itoa(version)
		m["release_notes"] = nil
		m["thumbnails"] = map[bool]int{false: 0, true: 1}[thumbs]
	} else {
		m["version"] = version
		m["releaseNotes"] = nil
		m["hasThumbnails"] = thumbs
	}
	return m
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

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

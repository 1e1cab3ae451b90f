package apisim

import (
	"errors"
	"net/http"
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

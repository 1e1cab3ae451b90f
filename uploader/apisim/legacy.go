package apisim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
	s.addSplat(sp, isSplatContent(obj.head), "processing failed: unsupported file format (expected PLY or SOG)")
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

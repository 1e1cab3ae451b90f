package apisim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

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
	stored, err := s.parts.ListParts(ctx, u.id)
	if err != nil {
		if errors.Is(err, ErrNoSuchUpload) {
			return v1Error(w, http.StatusNotFound), nil, false
		}
		return jsonError(w, http.StatusInternalServerError, "Internal server error (part store)"), nil, false
	}
	parts, total, err := checkParts(sent, stored, u.partSize, u.lastPart(), u.req.ContentLength)
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
	return s.publish(u, obj, parts)
}

// publish records u's splat of the assembled obj and returns it with the
// status due: Created, or Bad Gateway when the uncertain fault comes up.
func (s *Server) publish(u *upload, obj ObjectInfo, parts []Part) (code int, sp *splat, uncertain bool) {
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
	s.addSplat(sp, matchesSourceFormat(sp.format, obj.Head),
		fmt.Sprintf("processing failed: the file is not %s (its sourceFormat)", strings.ToUpper(sp.format)))
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
func checkParts(sent, stored []Part, partSize int64, last int, contentLength int64) ([]Part, int64, error) {
	byNum := make(map[int]Part, len(stored))
	for _, p := range stored {
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

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The SuperSplat API v1 (docs/api-v1.md): resumable multipart uploads through
// presigned S3 part URLs, over the same Client, token, pacer, Observer and
// redaction as the legacy API. A request the contract would refuse with 400
// is a *RequestError and is not sent; request bodies carry only the
// contract's fields (closed schemas), responses are decoded tolerantly.

// v1Prefix is the path of the v1 API below the base URL.
const v1Prefix = "/api/supersplat/v1"

// toolID is the pattern of uploadClient.id and softwareTools items.
var toolID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// Me returns the account behind the token; the daemon calls it once at
// start to check the token and name the account.
func (c *Client) Me(ctx context.Context) (Me, error) {
	req, err := c.newRequest(ctx, http.MethodGet, v1Prefix+"/me", nil, nil)
	if err != nil {
		return Me{}, err
	}
	var w wireMe
	if err := c.do(ctx, RouteV1Me, req, &w); err != nil {
		return Me{}, err
	}
	me := Me{ID: strings.TrimSpace(string(w.ID)), Username: string(w.Username)}
	if me.ID == "" {
		return me, &ProtocolError{Route: RouteV1Me, Reason: "no id"}
	}
	return me, nil
}

// ListSplats returns one page of the caller's own splats, in the server's
// order (newest first). limit is 1..MaxSplatsLimit, 0 for the server's
// default (50); skip is 0..MaxSplatsSkip. Page on with skip += len(Data)
// until skip reaches Pagination.Total.
func (c *Client) ListSplats(ctx context.Context, limit, skip int) (SplatList, error) {
	if limit < 0 || limit > MaxSplatsLimit {
		return SplatList{}, &RequestError{Route: RouteV1Splats, Reason: fmt.Sprintf("limit %d is outside 1..%d", limit, MaxSplatsLimit)}
	}
	if skip < 0 || skip > MaxSplatsSkip {
		return SplatList{}, &RequestError{Route: RouteV1Splats, Reason: fmt.Sprintf("skip %d is outside 0..%d", skip, MaxSplatsSkip)}
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if skip > 0 {
		q.Set("skip", strconv.Itoa(skip))
	}
	req, err := c.newRequest(ctx, http.MethodGet, v1Prefix+"/splats", q, nil)
	if err != nil {
		return SplatList{}, err
	}
	var w wireSplatList
	if err := c.do(ctx, RouteV1Splats, req, &w); err != nil {
		return SplatList{}, err
	}
	list := SplatList{
		Data: make([]SplatV1, 0, len(w.Data)),
		Pagination: Pagination{
			Skip:  int(w.Pagination.Skip),
			Limit: int(w.Pagination.Limit),
			Total: int(w.Pagination.Total),
		},
	}
	for i, raw := range w.Data {
		var ws wireSplatV1
		if err := decodeItem(raw, &ws); err != nil {
			return SplatList{}, &ProtocolError{Route: RouteV1Splats, Reason: "data item " + strconv.Itoa(i) + " is not a splat object", Err: err}
		}
		list.Data = append(list.Data, ws.splat())
	}
	return list, nil
}

// SplatV1 fetches one splat by its v1 id, to poll processing until Status
// is SplatCompleted or SplatFailed. (Splat is the legacy API's call.)
func (c *Client) SplatV1(ctx context.Context, id string) (SplatV1, error) {
	if err := checkPathID(RouteV1GetSplat, "splat id", id, maxSplatIDLen); err != nil {
		return SplatV1{}, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, v1Prefix+"/splats/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return SplatV1{}, err
	}
	var w wireSplatV1
	if err := c.do(ctx, RouteV1GetSplat, req, &w); err != nil {
		return SplatV1{}, err
	}
	return w.splat(), nil
}

// CreateUpload creates an upload session under the Idempotency-Key key (1..200
// visible ASCII characters, required by splatd), or returns that key's
// session; created is true only on 201. Title and description are cut to
// MaxTitleLen and MaxDescriptionLen; any other field outside the contract is
// a *RequestError. An answer without an id or a positive partSize is a
// *ProtocolError: the session may exist, and the same key finds it.
func (c *Client) CreateUpload(ctx context.Context, key string, r CreateUploadRequest) (s UploadSession, created bool, err error) {
	const route = RouteV1CreateUpload
	if err := checkIdempotencyKey(key); err != nil {
		return UploadSession{}, false, err
	}
	body, err := c.createBody(r)
	if err != nil {
		return UploadSession{}, false, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, v1Prefix+"/splats/uploads", nil, body)
	if err != nil {
		return UploadSession{}, false, err
	}
	req.Header.Set("Idempotency-Key", key)
	var w wireUploadSession
	status, _, err := c.send(ctx, route, req, &w)
	if err != nil {
		return UploadSession{}, false, err
	}
	s = w.session()
	created = status == http.StatusCreated
	switch {
	case s.ID == "":
		return s, created, &ProtocolError{Route: route, Reason: "no session id (the session may exist: create again with the same key)"}
	case s.PartSize <= 0:
		return s, created, &ProtocolError{Route: route, Reason: "no positive partSize"}
	}
	return s, created, nil
}

// createBody checks r against the contract and builds the closed body.
func (c *Client) createBody(r CreateUploadRequest) (*wireCreateUpload, error) {
	const route = RouteV1CreateUpload
	if !r.SourceFormat.Valid() {
		return nil, &RequestError{Route: route, Reason: fmt.Sprintf("unknown sourceFormat %q (want ply, sog, ssog, lcc or spz)", string(r.SourceFormat))}
	}
	if r.ContentLength < 0 || r.ContentLength > MaxContentLength {
		return nil, &RequestError{Route: route, Reason: fmt.Sprintf("contentLength %d is outside 0..%d", r.ContentLength, int64(MaxContentLength))}
	}
	if len(r.SoftwareTools) > MaxSoftwareTools {
		return nil, &RequestError{Route: route, Reason: fmt.Sprintf("%d softwareTools, at most %d", len(r.SoftwareTools), MaxSoftwareTools)}
	}
	for i, t := range r.SoftwareTools {
		if !toolID.MatchString(t) {
			return nil, &RequestError{Route: route, Reason: fmt.Sprintf("softwareTools item %q does not match %s", t, toolID)}
		}
		if slices.Contains(r.SoftwareTools[:i], t) {
			return nil, &RequestError{Route: route, Reason: fmt.Sprintf("softwareTools item %q repeated", t)}
		}
	}
	b := &wireCreateUpload{
		SourceFormat:  r.SourceFormat,
		Title:         strings.TrimSpace(CutRunes(strings.TrimSpace(r.Title), MaxTitleLen)),
		Description:   CutRunes(r.Description, MaxDescriptionLen),
		UploadClient:  wireUploadClient{ID: UploadClientID, Version: c.clientVer},
		SoftwareTools: slices.Clone(r.SoftwareTools),
	}
	if r.ContentLength > 0 {
		n := r.ContentLength
		b.ContentLength = &n
	}
	return b, nil
}

// GetUpload reads an upload session and the parts the server has seen: how
// a client resumes. A session that is gone answers 404 (*APIError).
func (c *Client) GetUpload(ctx context.Context, id string) (UploadSession, error) {
	if err := checkPathID(RouteV1GetUpload, "upload id", id, maxUploadIDLen); err != nil {
		return UploadSession{}, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, v1Prefix+"/splats/uploads/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return UploadSession{}, err
	}
	var w wireUploadSession
	if err := c.do(ctx, RouteV1GetUpload, req, &w); err != nil {
		return UploadSession{}, err
	}
	s := w.session()
	if s.ID == "" {
		return s, &ProtocolError{Route: RouteV1GetUpload, Reason: "no session id"}
	}
	return s, nil
}

// PartURLs signs upload URLs for parts (1..MaxPartURLsPerCall numbers, each
// 1..MaxPartNumber) in one call, never split: a longer list is a
// *RequestError. The answer holds an absolute URL for every part asked, in
// that order, or it is a *ProtocolError.
func (c *Client) PartURLs(ctx context.Context, uploadID string, parts []int) (PartURLs, error) {
	const route = RouteV1PartURLs
	if err := checkPathID(route, "upload id", uploadID, maxUploadIDLen); err != nil {
		return PartURLs{}, err
	}
	if len(parts) == 0 || len(parts) > MaxPartURLsPerCall {
		return PartURLs{}, &RequestError{Route: route, Reason: fmt.Sprintf("%d part numbers, want 1..%d per call", len(parts), MaxPartURLsPerCall)}
	}
	for _, n := range parts {
		if n < 1 || n > MaxPartNumber {
			return PartURLs{}, &RequestError{Route: route, Reason: fmt.Sprintf("part number %d is outside 1..%d", n, MaxPartNumber)}
		}
	}
	req, err := c.newRequest(ctx, http.MethodPost, v1Prefix+"/splats/uploads/"+url.PathEscape(uploadID)+"/part-upload-urls", nil,
		wirePartNumbers{Parts: slices.Clone(parts)})
	if err != nil {
		return PartURLs{}, err
	}
	var w wirePartURLs
	if err := c.do(ctx, route, req, &w); err != nil {
		return PartURLs{}, err
	}
	out := PartURLs{UploadID: strings.TrimSpace(string(w.UploadID)), PartSize: int64(w.PartSize)}
	if out.UploadID != "" && out.UploadID != uploadID {
		return PartURLs{}, &ProtocolError{Route: route, Reason: "URLs for another upload session"}
	}
	byPart := make(map[int]PartURL, len(w.URLs))
	for _, raw := range w.URLs {
		var wu wirePartURL
		if decodeItem(raw, &wu) != nil {
			continue // unusable item: the part's URL counts as missing below
		}
		n := int(wu.PartNumber)
		if _, dup := byPart[n]; dup {
			continue
		}
		byPart[n] = PartURL{PartNumber: n, URL: strings.TrimSpace(string(wu.URL)), ExpiresAt: wu.ExpiresAt.t}
	}
	for _, n := range parts {
		p, ok := byPart[n]
		if !ok || p.URL == "" {
			return PartURLs{}, &ProtocolError{Route: route, Reason: "no URL for part " + strconv.Itoa(n)}
		}
		if u, err := url.Parse(p.URL); err != nil || !u.IsAbs() || u.Host == "" {
			return PartURLs{}, &ProtocolError{Route: route, Reason: "the URL of part " + strconv.Itoa(n) + " is not an absolute URL"}
		}
		out.URLs = append(out.URLs, p)
	}
	return out, nil
}

// PutPart streams one part (exactly size bytes) to its presigned URL and
// returns storage's ETag byte for byte, quotes included (complete needs it).
// It is Put under S3's UploadPart rules: no Authorization, Content-Type or
// x-amz-* header, no redirect, plain http only to loopback. A refusal is an
// *APIError with Route RouteV1PartPut and FromStorage; a missing ETag is a
// *ProtocolError. Parts count toward Observer.UploadBytes, not UploadDone.
func (c *Client) PutPart(ctx context.Context, partURL string, body io.Reader, size int64, progress func(sent int64)) (etag string, err error) {
	h, err := c.storagePut(ctx, RouteV1PartPut, partURL, body, size, progress, "")
	if err != nil {
		return "", err
	}
	etag = h.Get("ETag")
	if etag == "" {
		return "", &ProtocolError{Route: RouteV1PartPut, Reason: "no ETag header in the storage answer"}
	}
	return etag, nil
}

// PartsDone records one file's multipart upload as finished
// (Observer.UploadDone), which PutPart does not: a file sent as N parts is
// one upload, timed by the caller from its first part to its last.
func (c *Client) PartsDone(d time.Duration) { c.obs.UploadDone(d) }

// CompleteUpload asks the server to assemble the parts (1..MaxPartNumber, each
// number once, with its ETag; sent in ascending order) into the splat.
// replayed is true unless the answer is 201 (a 200 is a session completed
// before). An answer without a splatId returns the decoded Completion with a
// *ProtocolError; completing again returns the id.
func (c *Client) CompleteUpload(ctx context.Context, uploadID string, parts []CompletedPart) (comp Completion, replayed bool, err error) {
	const route = RouteV1Complete
	if err := checkPathID(route, "upload id", uploadID, maxUploadIDLen); err != nil {
		return Completion{}, false, err
	}
	if len(parts) == 0 || len(parts) > MaxPartNumber {
		return Completion{}, false, &RequestError{Route: route, Reason: fmt.Sprintf("%d parts, want 1..%d", len(parts), MaxPartNumber)}
	}
	body := wireComplete{Parts: make([]wireCompletedPart, 0, len(parts))}
	for _, p := range parts {
		if p.PartNumber < 1 || p.PartNumber > MaxPartNumber {
			return Completion{}, false, &RequestError{Route: route, Reason: fmt.Sprintf("part number %d is outside 1..%d", p.PartNumber, MaxPartNumber)}
		}
		if p.ETag == "" {
			return Completion{}, false, &RequestError{Route: route, Reason: "part " + strconv.Itoa(p.PartNumber) + " has no ETag"}
		}
		body.Parts = append(body.Parts, wireCompletedPart{PartNumber: p.PartNumber, ETag: p.ETag})
	}
	slices.SortFunc(body.Parts, func(a, b wireCompletedPart) int { return a.PartNumber - b.PartNumber })
	for i := 1; i < len(body.Parts); i++ {
		if body.Parts[i].PartNumber == body.Parts[i-1].PartNumber {
			return Completion{}, false, &RequestError{Route: route, Reason: "part " + strconv.Itoa(body.Parts[i].PartNumber) + " listed twice"}
		}
	}
	req, err := c.newRequest(ctx, http.MethodPost, v1Prefix+"/splats/uploads/"+url.PathEscape(uploadID)+"/complete", nil, body)
	if err != nil {
		return Completion{}, false, err
	}
	var w wireCompletion
	status, h, err := c.send(ctx, route, req, &w)
	if err != nil {
		return Completion{}, false, err
	}
	comp = Completion{
		UploadID: strings.TrimSpace(string(w.UploadID)),
		Status:   UploadStatus(strings.TrimSpace(string(w.Status))),
		SplatID:  strings.TrimSpace(string(w.SplatID)),
		EditURL:  strings.TrimSpace(string(w.EditURL)),
		Location: h.Get("Location"),
	}
	replayed = status != http.StatusCreated
	if comp.SplatID == "" {
		return comp, replayed, &ProtocolError{Route: route, Reason: "no splatId in the complete answer (the splat may exist: complete again)"}
	}
	return comp, replayed, nil
}

// checkPathID refuses an empty or over-long path parameter.
func checkPathID(route, what, id string, max int) error {
	if strings.TrimSpace(id) == "" {
		return &RequestError{Route: route, Reason: "empty " + what}
	}
	if n := utf8.RuneCountInString(id); n > max {
		return &RequestError{Route: route, Reason: fmt.Sprintf("%s of %d characters, at most %d", what, n, max)}
	}
	return nil
}

// checkIdempotencyKey accepts 1..MaxIdempotencyKeyLen visible ASCII
// characters: a header value that no proxy rewrites.
func checkIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKeyLen {
		return &RequestError{Route: RouteV1CreateUpload, Reason: fmt.Sprintf("Idempotency-Key of %d characters, want 1..%d", len(key), MaxIdempotencyKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return &RequestError{Route: RouteV1CreateUpload, Reason: "Idempotency-Key holds a character other than visible ASCII"}
		}
	}
	return nil
}

// CutRunes returns s cut to at most n runes, never inside a UTF-8 sequence
// (the service's limits count characters). An invalid byte counts as one
// rune, as it becomes one U+FFFD in JSON.
func CutRunes(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}

// clientVersion picks uploadClient.version: the option, else the version
// in a "splatd/<version>" user agent, else "dev"; cut to 64 characters.
func clientVersion(opt, userAgent string) string {
	v := strings.TrimSpace(opt)
	if v == "" {
		if rest, ok := strings.CutPrefix(userAgent, UploadClientID+"/"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v = f[0]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return CutRunes(v, maxClientVersionLen)
}

// decodeItem decodes one array item of an open schema: it must be an
// object, its unknown fields are ignored.
func decodeItem(raw []byte, v any) error {
	if s := strings.TrimSpace(string(raw)); s == "" || s[0] != '{' {
		return errors.New("not an object")
	}
	return json.Unmarshal(raw, v)
}

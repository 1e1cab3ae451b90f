package apisim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// The v1 request schemas are closed (additionalProperties: false): this
// file checks bodies field by field against them, by exact names, types and
// limits, rather than decoding into structs, which would silently drop an
// unknown field or accept a wrong spelling.

// badRequest is why a v1 request is refused 400 "Invalid request". The
// reason goes to Stats.InvalidRequests and the debug log, never the body,
// which is always the documented message.
type badRequest struct {
	reason  string
	unknown []string // paths of unknown fields, if that is the reason
}

func (e *badRequest) Error() string { return e.reason }

func invalidf(format string, args ...any) error {
	return &badRequest{reason: fmt.Sprintf(format, args...)}
}

// idPattern is the pattern of uploadClient.id and of softwareTools items.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// decodeV1 reads a required JSON object body. Numbers stay json.Number so
// that integers are checked exactly.
func decodeV1(r *http.Request) (map[string]any, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, invalidf("Content-Type must be application/json")
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalidf("body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidf("body: data after the JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalidf("body: want an object")
	}
	return m, nil
}

// closed refuses names of m that allowed does not list, naming every one.
func closed(m map[string]any, path string, allowed ...string) error {
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, join(path, k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return &badRequest{reason: "unknown field " + strings.Join(unknown, ", "), unknown: unknown}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// str checks an optional string field of m (present=false when absent).
// Lengths count characters, as JSON Schema does.
func str(m map[string]any, path, name string, minLen, maxLen int) (v string, present bool, err error) {
	raw, ok := m[name]
	if !ok {
		return "", false, nil
	}
	v, isStr := raw.(string)
	if !isStr {
		return "", true, invalidf("%s: want a string", join(path, name))
	}
	if n := utf8.RuneCountInString(v); n < minLen || n > maxLen {
		return "", true, invalidf("%s: length %d not in %d..%d", join(path, name), n, minLen, maxLen)
	}
	return v, true, nil
}

// integer checks that v is a JSON integer (1, 1.0 and 1e0 alike, as JSON
// Schema counts them) within lo..hi.
func integer(v any, where string, lo, hi int64) (int64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, invalidf("%s: want an integer", where)
	}
	rat, ok := new(big.Rat).SetString(string(num))
	if !ok || !rat.IsInt() || !rat.Num().IsInt64() {
		return 0, invalidf("%s: want an integer", where)
	}
	n := rat.Num().Int64()
	if n < lo || n > hi {
		return 0, invalidf("%s: %d not in %d..%d", where, n, lo, hi)
	}
	return n, nil
}

// createRequest is a checked CreateUploadRequest.
type createRequest struct {
	SourceFormat  string
	ContentLength int64 // -1: not given
	Title         string
	HasTitle      bool
	Description   string
	ClientID      string
	ClientVersion string
	SoftwareTools []string
}

// sourceFormats is the sourceFormat enum, with the revision that adds spz.
var sourceFormats = []string{"ply", "sog", "ssog", "lcc", "spz"}

// maxContentLength is the schema's bound on contentLength.
const maxContentLength = 25_000_000_000

func parseCreate(m map[string]any) (createRequest, error) {
	req := createRequest{ContentLength: -1}
	if err := closed(m, "", "sourceFormat", "contentLength", "title", "description", "uploadClient", "softwareTools"); err != nil {
		return req, err
	}
	f, ok, err := str(m, "", "sourceFormat", 1, 16)
	switch {
	case err != nil:
		return req, err
	case !ok:
		return req, invalidf("sourceFormat: required")
	case !slices.Contains(sourceFormats, f):
		return req, invalidf("sourceFormat: %q not one of %v", f, sourceFormats)
	}
	req.SourceFormat = f
	if v, ok := m["contentLength"]; ok {
		if req.ContentLength, err = integer(v, "contentLength", 0, maxContentLength); err != nil {
			return req, err
		}
	}
	if req.Title, req.HasTitle, err = str(m, "", "title", 1, 100); err != nil {
		return req, err
	}
	if req.Description, _, err = str(m, "", "description", 0, 5000); err != nil {
		return req, err
	}
	if v, ok := m["uploadClient"]; ok {
		uc, isObj := v.(map[string]any)
		if !isObj {
			return req, invalidf("uploadClient: want an object")
		}
		if err := closed(uc, "uploadClient", "id", "version"); err != nil {
			return req, err
		}
		id, ok, err := str(uc, "uploadClient", "id", 1, 64)
		switch {
		case err != nil:
			return req, err
		case !ok:
			return req, invalidf("uploadClient.id: required")
		case !idPattern.MatchString(id):
			return req, invalidf("uploadClient.id: %q does not match %s", id, idPattern)
		}
		req.ClientID = id
		if req.ClientVersion, _, err = str(uc, "uploadClient", "version", 1, 64); err != nil {
			return req, err
		}
	}
	if v, ok := m["softwareTools"]; ok {
		tools, isArr := v.([]any)
		if !isArr {
			return req, invalidf("softwareTools: want an array")
		}
		if len(tools) > 6 {
			return req, invalidf("softwareTools: %d items, at most 6", len(tools))
		}
		for _, t := range tools {
			id, isStr := t.(string)
			if !isStr || !idPattern.MatchString(id) {
				return req, invalidf("softwareTools: item %v does not match %s", t, idPattern)
			}
			if slices.Contains(req.SoftwareTools, id) {
				return req, invalidf("softwareTools: %q twice", id)
			}
			req.SoftwareTools = append(req.SoftwareTools, id)
		}
	}
	return req, nil
}

// same reports whether a replayed create asked for the same upload.
func (a createRequest) same(b createRequest) bool {
	return a.SourceFormat == b.SourceFormat && a.ContentLength == b.ContentLength &&
		a.Title == b.Title && a.Description == b.Description
}

// maxPartNumber is S3's (and the schema's) highest part number.
const maxPartNumber = 10000

// parsePartNumbers checks a part-upload-urls body: {"parts": [int]} with
// 1..100 numbers, each 1..10000.
func parsePartNumbers(m map[string]any) ([]int, error) {
	if err := closed(m, "", "parts"); err != nil {
		return nil, err
	}
	arr, ok := m["parts"].([]any)
	if !ok {
		return nil, invalidf("parts: required, an array")
	}
	if len(arr) < 1 || len(arr) > 100 {
		return nil, invalidf("parts: %d items, want 1..100", len(arr))
	}
	out := make([]int, 0, len(arr))
	for _, v := range arr {
		n, err := integer(v, "parts[]", 1, maxPartNumber)
		if err != nil {
			return nil, err
		}
		out = append(out, int(n))
	}
	return out, nil
}

// parseCompleteParts checks a complete body: {"parts": [{partNumber, etag}]}
// with 1..10000 items and no other fields anywhere.
func parseCompleteParts(m map[string]any) ([]Part, error) {
	if err := closed(m, "", "parts"); err != nil {
		return nil, err
	}
	arr, ok := m["parts"].([]any)
	if !ok {
		return nil, invalidf("parts: required, an array")
	}
	if len(arr) < 1 || len(arr) > maxPartNumber {
		return nil, invalidf("parts: %d items, want 1..%d", len(arr), maxPartNumber)
	}
	out := make([]Part, 0, len(arr))
	var unknown []string
	for _, v := range arr {
		item, ok := v.(map[string]any)
		if !ok {
			return nil, invalidf("parts[]: want an object")
		}
		if err := closed(item, "parts[]", "partNumber", "etag"); err != nil {
			for _, u := range err.(*badRequest).unknown {
				if !slices.Contains(unknown, u) {
					unknown = append(unknown, u)
				}
			}
			continue
		}
		rawN, ok := item["partNumber"]
		if !ok {
			return nil, invalidf("parts[].partNumber: required")
		}
		n, err := integer(rawN, "parts[].partNumber", 1, maxPartNumber)
		if err != nil {
			return nil, err
		}
		etag, ok, err := str(item, "parts[]", "etag", 1, 1024)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, invalidf("parts[].etag: required")
		}
		out = append(out, Part{Number: int(n), ETag: etag})
	}
	if len(unknown) > 0 {
		return nil, &badRequest{reason: "unknown field " + strings.Join(unknown, ", "), unknown: unknown}
	}
	return out, nil
}

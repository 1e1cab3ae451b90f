package apisim

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// doV1 sends a request to a v1 route (path below /api/supersplat) with
// extra headers; body as for client.do.
func (c *client) doV1(method, path string, body any, hdr map[string]string) reply {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				c.t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, c.s.URL()+"/api/supersplat"+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.send(req)
}

// session is the part of an UploadSession answer the tests read.
type session struct {
	ID            string  `json:"id"`
	Status        string  `json:"status"`
	ContentLength *int64  `json:"contentLength"`
	PartSize      int64   `json:"partSize"`
	ExpiresAt     string  `json:"expiresAt"`
	SplatID       string  `json:"splatId"`
	UploadedParts []sPart `json:"uploadedParts"`
}

type sPart struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
	Size       int64  `json:"size"`
}

func decodeInto[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// createBody is a valid create request for data.
func createBody(data []byte) map[string]any {
	return map[string]any{
		"sourceFormat": "ply", "contentLength": len(data), "title": "Scan", "description": "D",
		"uploadClient": map[string]any{"id": "splatd", "version": "1.2.3"},
	}
}

// create makes a session, failing unless the answer is want.
func (c *client) create(key string, body any, want int) session {
	c.t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	r := c.doV1("POST", "/v1/splats/uploads", body, hdr)
	if r.code != want {
		c.t.Fatalf("create: %d %s, want %d", r.code, r.body, want)
	}
	return decodeInto[session](c.t, r)
}

func (c *client) getSession(id string) session {
	c.t.Helper()
	r := c.doV1("GET", "/v1/splats/uploads/"+id, nil, nil)
	if r.code != 200 {
		c.t.Fatalf("get session: %d %s", r.code, r.body)
	}
	return decodeInto[session](c.t, r)
}

type partURL struct {
	PartNumber int    `json:"partNumber"`
	URL        string `json:"url"`
	ExpiresAt  string `json:"expiresAt"`
}

// signParts asks for part URLs, by part number.
func (c *client) signParts(id string, nums ...int) map[int]string {
	c.t.Helper()
	r := c.doV1("POST", "/v1/splats/uploads/"+id+"/part-upload-urls", map[string]any{"parts": nums}, nil)
	if r.code != 200 {
		c.t.Fatalf("part-upload-urls %v: %d %s", nums, r.code, r.body)
	}
	v := decodeInto[struct {
		UploadID string    `json:"uploadId"`
		PartSize int64     `json:"partSize"`
		URLs     []partURL `json:"urls"`
	}](c.t, r)
	if v.UploadID != id || v.PartSize <= 0 || len(v.URLs) != len(nums) {
		c.t.Fatalf("part-upload-urls answer %s", r.body)
	}
	out := map[int]string{}
	for _, u := range v.URLs {
		out[u.PartNumber] = u.URL
	}
	return out
}

// partOf returns part n (1-based) of data.
func partOf(data []byte, partSize int64, n int) []byte {
	lo := int64(n-1) * partSize
	return data[lo:min(lo+partSize, int64(len(data)))]
}

func numParts(size, partSize int64) int { return max(1, int((size+partSize-1)/partSize)) }

// putParts signs and PUTs the given parts of data, returning their ETags.
func (c *client) putParts(id string, data []byte, partSize int64, nums ...int) map[int]string {
	c.t.Helper()
	urls := c.signParts(id, nums...)
	etags := map[int]string{}
	for _, n := range nums {
		r, err := c.putRaw(urls[n], partOf(data, partSize, n))
		if err != nil || r.code != 200 {
			c.t.Fatalf("PUT part %d: %v %d %s", n, err, r.code, r.body)
		}
		etags[n] = r.header.Get("ETag")
	}
	return etags
}

// putRaw PUTs data with only Content-Length, as docs/api-v1.md asks.
func (c *client) putRaw(u string, data []byte) (reply, error) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPut, u, bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

// completeBody lists parts 1..n with their ETags.
func completeBody(etags map[int]string, n int) map[string]any {
	parts := make([]map[string]any, 0, n)
	for i := 1; i <= n; i++ {
		parts = append(parts, map[string]any{"partNumber": i, "etag": etags[i]})
	}
	return map[string]any{"parts": parts}
}

func (c *client) complete(id string, body any) reply {
	c.t.Helper()
	return c.doV1("POST", "/v1/splats/uploads/"+id+"/complete", body, nil)
}

// publishV1 runs the whole flow for data and returns the splat id.
func (c *client) publishV1(key string, data []byte) string {
	c.t.Helper()
	sess := c.create(key, createBody(data), 201)
	n := numParts(int64(len(data)), sess.PartSize)
	nums := make([]int, n)
	for i := range nums {
		nums[i] = i + 1
	}
	etags := c.putParts(sess.ID, data, sess.PartSize, nums...)
	r := c.complete(sess.ID, completeBody(etags, n))
	if r.code != 201 {
		c.t.Fatalf("complete: %d %s", r.code, r.body)
	}
	return r.json(c.t)["splatId"].(string)
}

func quotedMD5(b []byte) string {
	s := md5.Sum(b)
	return fmt.Sprintf("%q", hex.EncodeToString(s[:]))
}

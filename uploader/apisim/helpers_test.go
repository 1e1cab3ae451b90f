package apisim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injectable clock that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 14, 15, 9, 26, 500_000_000, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newSim starts a simulator closed at the end of the test.
func newSim(t *testing.T, o Options) *Server {
	t.Helper()
	if o.Seed == 0 {
		o.Seed = 42
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// client is a plain net/http client of the simulator, written from the
// spec like a test would, not the project's uploader.
type client struct {
	t     *testing.T
	s     *Server
	hc    *http.Client
	token string
}

func newClient(t *testing.T, s *Server) *client {
	t.Helper()
	hc := s.Client()
	t.Cleanup(hc.CloseIdleConnections)
	return &client{t: t, s: s, hc: hc, token: s.Token()}
}

type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
	return m
}

// errorText returns the `error` field of a JSON error body, failing the
// test when the body is not of that shape.
func (r reply) errorText(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(string)
	if !ok || len(m) != 1 {
		t.Fatalf("error body %q: want {\"error\": string}", r.body)
	}
	return e
}

// do sends a request to the API; body, if not nil, is sent as JSON (a
// string is sent verbatim).
func (c *client) do(method, path string, body any) reply {
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
	req, err := http.NewRequest(method, c.s.URL()+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return c.send(req)
}

func (c *client) send(req *http.Request) reply {
	c.t.Helper()
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

// put uploads data to a signed URL the way a correct client does.
func (c *client) put(signedURL string, data []byte) (reply, error) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPut, signedURL, bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "binary/octet-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

// signedURL asks for a signed URL and returns it with the key.
func (c *client) signedURL(name string) (string, string) {
	c.t.Helper()
	r := c.do("POST", "/api/upload/signed-url", map[string]string{"fileName": name})
	if r.code != 200 {
		c.t.Fatalf("signed-url: %d %s", r.code, r.body)
	}
	m := r.json(c.t)
	u, _ := m["signedUrl"].(string)
	key, _ := m[c.s.o.KeyField].(string)
	if u == "" || key == "" {
		c.t.Fatalf("signed-url body %s", r.body)
	}
	return u, key
}

// upload signs and PUTs data, returning the key.
func (c *client) upload(name string, data []byte) string {
	c.t.Helper()
	u, key := c.signedURL(name)
	r, err := c.put(u, data)
	if err != nil || r.code != 200 {
		c.t.Fatalf("PUT: %v %d %s", err, r.code, r.body)
	}
	return key
}

// publish publishes key and returns the answer.
func (c *client) publish(key string, extra map[string]any) reply {
	c.t.Helper()
	body := map[string]any{
		c.s.o.KeyField: key, "title": "T", "description": "D", "listed": false, "format": "sog",
		"settings": map[string]any{"camera": map[string]any{"fov": 65}},
	}
	for k, v := range extra {
		body[k] = v
	}
	return c.do("POST", "/api/splats/publish", body)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// plyBytes is a small file that passes the simulator's content check.
func plyBytes(n int) []byte {
	b := []byte("ply\nformat binary_little_endian 1.0\nend_header\n")
	for len(b) < n {
		b = append(b, byte(len(b)))
	}
	return b
}

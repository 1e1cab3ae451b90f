package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

const testToken = "tok-S3CR3T-0123456789abcdef"

// testObserver records the client's Observer calls.
type testObserver struct {
	NopObserver
	mu          sync.Mutex
	requests    []string // "route code"
	uploadBytes int64
	uploadDone  int
}

func (o *testObserver) APIRequest(route string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests = append(o.requests, route+" "+strconv.Itoa(code))
}

func (o *testObserver) UploadBytes(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.uploadBytes += n
}

func (o *testObserver) UploadDone(time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.uploadDone++
}

// newTestServer starts a TLS API server and a Client trusting it.
func newTestServer(t testing.TB, h http.Handler) (*Client, *httptest.Server, *testObserver) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	obs := &testObserver{}
	c := newTestClient(t, srv.URL, obs, 0)
	return c, srv, obs
}

func newTestClient(t testing.TB, baseURL string, obs Observer, timeout time.Duration) *Client {
	t.Helper()
	c, err := NewClient(ClientOptions{BaseURL: baseURL, Token: testToken, RootCAs: testRoots(), Observer: obs, Timeout: timeout, UserAgent: "splatd-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testRoots trusts httptest's certificate, which every httptest TLS
// server presents.
var testRoots = sync.OnceValue(func() *x509.CertPool {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
})

// newStorageServer starts a second TLS server standing in for object
// storage.
func newStorageServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func writeJSON(w http.ResponseWriter, status int, v string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, v)
}

func TestClientNewClientRejectsNonHTTPS(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"http://api.example.com", "ftp://api.example.com", "api.example.com", ""} {
		_, err := NewClient(ClientOptions{BaseURL: base, Token: testToken})
		if err == nil {
			t.Errorf("NewClient(%q) accepted", base)
			continue
		}
		if u, _ := url.Parse(base); u != nil && u.Scheme != "" && !strings.Contains(err.Error(), strconv.Quote(u.Scheme)) {
			t.Errorf("NewClient(%q) error %q does not name the scheme", base, err)
		}
	}
	if _, err := NewClient(ClientOptions{BaseURL: "https://api.example.com/prefix/", Token: testToken}); err != nil {
		t.Errorf("https base URL refused: %v", err)
	}
}

func TestClientSignedURLAndPublishEchoKeyField(t *testing.T) {
	t.Parallel()
	for _, field := range []string{KeyFieldStorageKey, KeyFieldS3Key} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			var published map[string]any
			mux := http.NewServeMux()
			mux.HandleFunc("POST /api/upload/signed-url", func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
					t.Errorf("Authorization = %q", got)
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				var body map[string]any
				json.NewDecoder(r.Body).Decode(&body)
				if body["fileName"] != "scan.ply" || len(body) != 1 {
					t.Errorf("sign body = %v, want {fileName: scan.ply}", body)
				}
				writeJSON(w, 200, fmt.Sprintf(`{"signedUrl":"https://storage.example/b/k?X-Amz-Signature=abc","%s":"uploads/k.ply"}`, field))
			})
			mux.HandleFunc("POST /api/splats/publish", func(w http.ResponseWriter, r *http.Request) {
				json.NewDecoder(r.Body).Decode(&published)
				writeJSON(w, 201, `{"id":50,"hash":"h1","task":{"status":"running","message":""},"completedAt":null}`)
			})
			c, _, obs := newTestServer(t, mux)
			ctx := context.Background()

			up, err := c.SignedURL(ctx, "scan.ply")
			if err != nil {
				t.Fatal(err)
			}
			if up.KeyField != field || up.Key != "uploads/k.ply" || up.IssuedAt.IsZero() {
				t.Fatalf("upload = %+v", up)
			}
			settings := map[string]any{"camera": map[string]any{"fov": 65}, "animTracks": []any{}}
			sp, err := c.Publish(ctx, PublishRequest{Key: up.Key, KeyField: up.KeyField, PublishParams: state.PublishParams{Title: "Scan", Listed: true, Format: "sog", Settings: settings}})
			if err != nil {
				t.Fatal(err)
			}
			if sp.ID != "50" || sp.Outcome() != OutcomePending {
				t.Errorf("splat = %+v, outcome %v", sp, sp.Outcome())
			}
			other := KeyFieldS3Key
			if field == KeyFieldS3Key {
				other = KeyFieldStorageKey
			}
			if published[field] != "uploads/k.ply" || published[other] != nil {
				t.Errorf("publish body = %v: want the key under %s only", published, field)
			}
			if published["title"] != "Scan" || published["listed"] != true || published["format"] != "sog" {
				t.Errorf("publish body = %v", published)
			}
			if s, ok := published["settings"].(map[string]any); !ok || s["camera"] == nil {
				t.Errorf("settings not sent as an object: %v", published["settings"])
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if want := []string{"signed_url 200", "publish 201"}; strings.Join(obs.requests, ",") != strings.Join(want, ",") {
				t.Errorf("observed %v, want %v", obs.requests, want)
			}
		})
	}
}

func TestClientSignedURLWithoutKeyIsProtocolError(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"signedUrl":"https://storage.example/b/k?sig=1"}`)
	}))
	_, err := c.SignedURL(context.Background(), "a.ply")
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Route != RouteSignedURL {
		t.Fatalf("err = %v, want *ProtocolError", err)
	}
}

func TestClientSplatTolerantDecoding(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"50": `{"id":50,"hash":"h","title":"t","description":null,"format":"","version":0,"currentVersion":1,
			"releaseNotes":null,"thumbnails":0,"listed":false,"tags":[],"task":{"status":"running","message":""},
			"url":"https://viewer/view?id=h","userId":7,"completedAt":null,"createdAt":"2025-01-02T03:04:05.678Z"}`,
		"abc": `{"id":"abc","hash":"h2","title":7,"format":"sog","version":"3","release_notes":"notes",
			"hasThumbnails":true,"task":{"status":"Completed","message":null},"completedAt":"2025-01-02T04:00:00Z"}`,
	}
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/api/splats/")
		if r.Method != http.MethodGet || bodies[id] == "" {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, 200, bodies[id])
	}))
	ctx := context.Background()

	s, err := c.Splat(ctx, "50")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "50" || s.Version != "0" || s.ReleaseNotes != "" || s.HasThumbnails || s.CompletedAt != nil ||
		s.URL != "https://viewer/view?id=h" || s.CreatedAt.IsZero() || s.Outcome() != OutcomePending {
		t.Errorf("numeric record decoded as %+v", s)
	}
	s, err = c.Splat(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "abc" || s.Version != "3" || s.ReleaseNotes != "notes" || !s.HasThumbnails || s.Title != "7" ||
		s.CompletedAt == nil || s.Outcome() != OutcomeDone {
		t.Errorf("string record decoded as %+v", s)
	}
	_, err = c.Splat(ctx, "missing")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Route != RouteGetSplat {
		t.Errorf("missing splat: err = %v", err)
	}
}

func TestClientPublishWithoutIDReturnsRecordAndProtocolError(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, `{"hash":"h9","task":{"status":"running"}}`)
	}))
	s, err := c.Publish(context.Background(), PublishRequest{Key: "k", PublishParams: state.PublishParams{Title: "t"}})
	var pe *ProtocolError
	if !errors.As(err, &pe) || s.Hash != "h9" {
		t.Fatalf("Publish = (%+v, %v), want the record and a *ProtocolError", s, err)
	}
}

func TestClientAPIErrorMessages(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	cases := []struct {
		name, ctype, body string
		status            int
		want              string
	}{
		{"json error field", "application/json", `{"error":"storage limit exceeded"}`, 400, "storage limit exceeded"},
		{"json message field", "application/json", `{"message":"nope"}`, 403, "nope"},
		{"plain text excerpt", "text/plain", "  upstream\n  exploded  ", 502, "upstream exploded"},
		{"empty body", "text/plain", "", 503, "Service Unavailable"},
		{"huge body is capped", "text/plain", huge, 500, strings.Repeat("x", 200) + "…"},
		{"s3 xml", "application/xml", `<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`, 403, "AccessDenied: Request has expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, obs := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			_, err := c.Publish(context.Background(), PublishRequest{Key: "k"})
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want *APIError", err)
			}
			if ae.Route != RoutePublish || ae.Status != tc.status || ae.Message != tc.want || ae.HTTPStatus() != tc.status || ae.FromStorage() {
				t.Errorf("APIError = %+v, want message %q", ae, tc.want)
			}
			if want := fmt.Sprintf("publish: HTTP %d: %s", tc.status, tc.want); err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.requests) != 1 || obs.requests[0] != "publish "+strconv.Itoa(tc.status) {
				t.Errorf("observed %v", obs.requests)
			}
		})
	}
}

func TestClient429CarriesResetAndRetryAfter(t *testing.T) {
	t.Parallel()
	reset := time.Now().Add(42 * time.Second).Truncate(time.Second).UTC()
	for _, tc := range []struct {
		name, retryAfter string
		want             time.Duration
	}{
		{"seconds", "30", 30 * time.Second},
		{"http date", "", 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-RateLimit-Limit", "10")
				w.Header().Set("X-RateLimit-Remaining", "0")
				w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
				ra := tc.retryAfter
				if ra == "" {
					now := time.Now().UTC().Truncate(time.Second)
					w.Header().Set("Date", now.Format(http.TimeFormat))
					ra = now.Add(20 * time.Second).Format(http.TimeFormat)
				}
				w.Header().Set("Retry-After", ra)
				writeJSON(w, 429, `{"error":"Too many requests"}`)
			}))
			_, err := c.SignedURL(context.Background(), "a.ply")
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != 429 {
				t.Fatalf("err = %v", err)
			}
			if !ae.Reset.Equal(reset) || ae.RetryAfter != tc.want || ae.Message != "Too many requests" {
				t.Errorf("APIError = %+v, want reset %v retry-after %v", ae, reset, tc.want)
			}
		})
	}
}

func TestClientTokenNeverInErrors(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/splats/drop" {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		writeJSON(w, 401, `{"error":"invalid token `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`"}`)
	}))
	for _, id := range []string{"echo", "drop"} {
		_, err := c.Splat(context.Background(), id)
		if err == nil {
			t.Fatalf("%s: no error", id)
		}
		if strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: token in error %q", id, err)
		}
		var ae *APIError
		if errors.As(err, &ae) && strings.Contains(ae.Message, testToken) {
			t.Errorf("%s: token in APIError.Message %q", id, ae.Message)
		}
	}
}

func TestClientRedirects(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var otherHits int
	var otherAuth string
	other := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		otherHits++
		otherAuth = r.Header.Get("Authorization")
		mu.Unlock()
		writeJSON(w, 200, `{"id":"stolen"}`)
	})
	var sameAuth string
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/splats/away":
			http.Redirect(w, r, other.URL+"/api/splats/away?sig=zzz", http.StatusFound)
		case "/api/splats/moved":
			http.Redirect(w, r, "/api/splats/here", http.StatusTemporaryRedirect)
		case "/api/splats/here":
			sameAuth = r.Header.Get("Authorization")
			writeJSON(w, 200, `{"id":"here"}`)
		}
	}))
	ctx := context.Background()

	_, err := c.Splat(ctx, "away")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusFound {
		t.Fatalf("cross-host redirect: err = %v, want an APIError 302", err)
	}
	if strings.Contains(err.Error(), "zzz") {
		t.Errorf("redirect query leaked into %q", err)
	}
	mu.Lock()
	if otherHits != 0 || otherAuth != "" {
		t.Errorf("the other host got %d requests (Authorization %q)", otherHits, otherAuth)
	}
	mu.Unlock()

	s, err := c.Splat(ctx, "moved")
	if err != nil || s.ID != "here" {
		t.Fatalf("same-origin redirect: (%+v, %v)", s, err)
	}
	if sameAuth != "Bearer "+testToken {
		t.Errorf("same-origin redirect lost the bearer header: %q", sameAuth)
	}
}

func TestClientCheckpointsPaging(t *testing.T) {
	t.Parallel()
	var queries []url.Values
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() != "/api/branches/br%2F1/checkpoints" {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.URL.Query())
		if r.URL.Query().Get("skip") == "" {
			writeJSON(w, 200, `{"result":[
				{"id":"c3","user":{"id":12,"fullName":"Ada L","username":"ada"},"createdAt":"2025-03-01T10:00:00.000Z","description":"third"},
				{"id":"c2","user":{"id":"13","fullName":"Bob","username":"bob"},"createdAt":"2025-02-01T10:00:00Z","description":null}
			],"pagination":{"hasMore":true}}`)
			return
		}
		writeJSON(w, 200, `{"result":[{"id":"c1","user":null,"createdAt":null,"description":"first"}],"pagination":{"hasMore":false}}`)
	}))
	ctx := context.Background()
	p1, err := c.Checkpoints(ctx, "br/1", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if !p1.HasMore || len(p1.Checkpoints) != 2 {
		t.Fatalf("page 1 = %+v", p1)
	}
	a, b := p1.Checkpoints[0], p1.Checkpoints[1]
	if a.ID != "c3" || a.User.ID != 12 || a.User.Username != "ada" || a.User.FullName != "Ada L" || a.Description != "third" ||
		!a.CreatedAt.Equal(time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("checkpoint 0 = %+v", a)
	}
	if b.ID != "c2" || b.User.ID != 13 || b.Description != "" {
		t.Errorf("checkpoint 1 = %+v (string user id)", b)
	}
	p2, err := c.Checkpoints(ctx, "br/1", 0, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p2.HasMore || len(p2.Checkpoints) != 1 || p2.Checkpoints[0].ID != "c1" {
		t.Errorf("page 2 = %+v", p2)
	}
	if len(queries) != 2 || queries[0].Get("limit") != "2" || queries[0].Has("skip") ||
		queries[1].Has("limit") || queries[1].Get("skip") != "c2" {
		t.Errorf("queries = %v", queries)
	}
}

// patternReader yields n bytes of a repeating pattern without
// allocating, standing in for a large file.
type patternReader struct{ left int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	for i := range p {
		p[i] = byte(i)
	}
	r.left -= int64(len(p))
	return len(p), nil
}

func TestClientPutStreamsWithoutAuthorization(t *testing.T) {
	t.Parallel()
	const size = 5<<20 + 123
	type seen struct {
		auth, ctype, sum string
		length           int64
		n                int64
	}
	got := make(chan seen, 1)
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("Content-Type"), hex.EncodeToString(h.Sum(nil)), r.ContentLength, n}
	})
	obs := &testObserver{}
	c := newTestClient(t, "https://api.invalid", obs, 0)

	want := sha256.New()
	io.Copy(want, &patternReader{left: size})
	var last int64
	monotonic := true
	err := c.Put(context.Background(), storage.URL+"/bucket/key.ply?X-Amz-Signature=deadbeef", &patternReader{left: size}, size, func(sent int64) {
		if sent < last {
			monotonic = false
		}
		last = sent
	})
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.auth != "" {
		t.Errorf("storage received Authorization %q", s.auth)
	}
	if s.ctype != "binary/octet-stream" || s.length != size || s.n != size {
		t.Errorf("storage saw Content-Type %q, Content-Length %d, %d bytes", s.ctype, s.length, s.n)
	}
	if s.sum != hex.EncodeToString(want.Sum(nil)) {
		t.Error("storage received different bytes")
	}
	if last != size || !monotonic {
		t.Errorf("progress ended at %d (monotonic %v), want %d", last, monotonic, size)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.uploadBytes != size || obs.uploadDone != 1 || len(obs.requests) != 1 || obs.requests[0] != "storage_put 200" {
		t.Errorf("observer: bytes %d done %d requests %v", obs.uploadBytes, obs.uploadDone, obs.requests)
	}
}

func TestClientPutErrorsHideSignedQuery(t *testing.T) {
	t.Parallel()
	const sig = "X-Amz-Signature=0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cut":
			// Read a little, then drop the connection mid-body.
			io.CopyN(io.Discard, r.Body, 64<<10)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		case "/refused":
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusForbidden)
			var msg strings.Builder
			xml.EscapeText(&msg, []byte("bad "+r.URL.RawQuery+" for https://"+r.Host+r.URL.String()))
			fmt.Fprintf(w, `<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>`, msg.String())
		}
	})
	c := newTestClient(t, "https://api.invalid", nil, 0)
	query := "X-Amz-Credential=AKIAEXAMPLE%2F20250101&" + sig

	err := c.Put(context.Background(), storage.URL+"/cut?"+query, &patternReader{left: 8 << 20}, 8<<20, nil)
	if err == nil {
		t.Fatal("cut upload succeeded")
	}
	for _, leak := range []string{sig, "0f1e2d3c4b5a", "AKIAEXAMPLE", testToken} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("network error %q leaks %q", err, leak)
		}
	}
	var ue *url.Error
	if !errors.As(err, &ue) || strings.Contains(ue.URL, "Signature") {
		t.Errorf("errors.As *url.Error: %v (URL %q)", ue, func() string {
			if ue != nil {
				return ue.URL
			}
			return ""
		}())
	}

	err = c.Put(context.Background(), storage.URL+"/refused?"+query, &patternReader{left: 1000}, 1000, nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 403 || !ae.FromStorage() || ae.Route != RouteStoragePut {
		t.Fatalf("refused upload: err = %v", err)
	}
	if !strings.HasPrefix(ae.Message, "SignatureDoesNotMatch: bad") {
		t.Errorf("message = %q", ae.Message)
	}
	for _, leak := range []string{"0f1e2d3c4b5a", "AKIAEXAMPLE"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("storage error %q leaks %q", err, leak)
		}
	}
}

func TestClientPutAbortsStalledUpload(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-release // never read the body: the client's writes block
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	c := newTestClient(t, "https://api.invalid", nil, 300*time.Millisecond)
	const size = 1 << 30 // far more than the socket buffers hold
	err := c.Put(context.Background(), storage.URL+"/k?sig=secretsecret", &patternReader{left: size}, size, nil)
	if !errors.Is(err, errPutStalled) || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("err = %v, want a stall, said", err)
	}
	if strings.Contains(err.Error(), "secretsecret") {
		t.Errorf("stall error leaks the query: %q", err)
	}
}

func TestClientPutRejectsBadURLs(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "https://api.invalid", nil, 0)
	for _, u := range []string{"http://storage.example/k?sig=secretsecret", "not a url?sig=secretsecret", "/relative?sig=secretsecret"} {
		err := c.Put(context.Background(), u, strings.NewReader("x"), 1, nil)
		if err == nil || strings.Contains(err.Error(), "secretsecret") {
			t.Errorf("Put(%q) = %v", u, err)
		}
	}
}

// TestClientPutPlainHTTPOnLoopback allows a local object store without TLS
// (a MinIO on the same machine), never a remote one (above).
func TestClientPutPlainHTTPOnLoopback(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	var auth atomic.Bool
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		auth.Store(r.Header.Get("Authorization") != "")
	}))
	t.Cleanup(storage.Close)
	c := newTestClient(t, "https://api.invalid", nil, 0)
	if err := c.Put(context.Background(), storage.URL+"/k?sig=s", strings.NewReader("hello"), 5, nil); err != nil {
		t.Fatalf("Put over loopback http: %v", err)
	}
	if got.Load() != 5 || auth.Load() {
		t.Errorf("storage got %d bytes, Authorization sent: %v", got.Load(), auth.Load())
	}
}

func TestSplatOutcome(t *testing.T) {
	t.Parallel()
	at := time.Now()
	cases := []struct {
		status, message string
		completed       bool
		want            Outcome
	}{
		{"running", "", false, OutcomePending},
		{"Processing", "", false, OutcomePending},
		{"queued", "", false, OutcomePending},
		{"pending", "", false, OutcomePending},
		{"created", "", false, OutcomePending},
		{"uploading", "", false, OutcomePending},
		{"complete", "", true, OutcomeDone},
		{"completed", "", true, OutcomeDone},
		{"DONE", "", false, OutcomeDone},
		{"success", "", true, OutcomeDone},
		{"succeeded", "", true, OutcomeDone},
		{"failed", "bad ply", true, OutcomeFailed},
		{"failure", "", false, OutcomeFailed},
		{"error", "", false, OutcomeFailed},
		{"errored", "", false, OutcomeFailed},
		{"canceled", "", false, OutcomeFailed},
		{"cancelled", "", false, OutcomeFailed},
		{"", "", true, OutcomeDone},
		{"", "something broke", true, OutcomeUnknown},
		{"", "", false, OutcomeUnknown},
		{"frobnicating", "", false, OutcomeUnknown},
	}
	for _, tc := range cases {
		s := Splat{Task: Task{Status: tc.status, Message: tc.message}}
		if tc.completed {
			s.CompletedAt = &at
		}
		if got := s.Outcome(); got != tc.want {
			t.Errorf("Outcome(status %q, message %q, completed %v) = %v, want %v", tc.status, tc.message, tc.completed, got, tc.want)
		}
	}
}

// TestSplatOutcomeMinimalRecord: docs/api-legacy.md promises only id, hash, title,
// description and format from get-splat. Without a task object the format
// tells: empty while processing, the output format once done.
func TestSplatOutcomeMinimalRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want Outcome
	}{
		{`{"id":"7","hash":"h","title":"t","description":"","format":""}`, OutcomeUnknown},
		{`{"id":"7","hash":"h","title":"t","description":"","format":"sog"}`, OutcomeDone},
		{`{"id":"7","format":"sog","task":{"status":"running","message":""}}`, OutcomePending},
		{`{"id":"7","format":"sog","task":null}`, OutcomeDone},
	} {
		var w wireSplat
		if err := json.Unmarshal([]byte(tc.body), &w); err != nil {
			t.Fatal(err)
		}
		if got := w.splat().Outcome(); got != tc.want {
			t.Errorf("%s: Outcome = %v, want %v", tc.body, got, tc.want)
		}
	}
}

// BenchmarkPut uploads bodies of two sizes from a generating io.Reader to a
// loopback TLS storage server. B/op must stay flat across sizes: the body is
// streamed, never buffered.
func BenchmarkPut(b *testing.B) {
	storage := newStorageServer(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, bufio.NewReaderSize(r.Body, 64<<10))
	})
	c := newTestClient(b, "https://api.invalid", nil, 0)
	for _, size := range []int64{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(size)
			for b.Loop() {
				if err := c.Put(context.Background(), storage.URL+"/k?sig=s", &patternReader{left: size}, size, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package uploader

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// oneshotServer is a minimal API whose publish and poll answers a test
// chooses; storage lives on the same host.
func oneshotServer(t *testing.T, publish func(w http.ResponseWriter), poll func(n int32, w http.ResponseWriter)) (*httptest.Server, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	var publishes, polls atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/api/upload/signed-url":
			io.WriteString(w, `{"signedUrl":"`+srv.URL+`/storage/k?sig=s","storageKey":"k"}`)
		case "/storage/k":
		case "/api/splats/publish":
			publishes.Add(1)
			publish(w)
		case "/api/splats/50":
			poll(polls.Add(1), w)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &publishes, &polls
}

func oneshotFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a.ply")
	if err := os.WriteFile(p, []byte("ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func oneshotClient(t *testing.T, srv *httptest.Server) *api.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := api.NewClient(api.ClientOptions{BaseURL: srv.URL, Token: "tok", RootCAs: roots, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPublishFileSurvivesAnUnreadablePoll: one unreadable poll answer (a
// proxy's page) is asked again, not a reason to give up on a splat that
// exists (a user would re-run the command and publish twice).
func TestPublishFileSurvivesAnUnreadablePoll(t *testing.T) {
	t.Parallel()
	srv, publishes, _ := oneshotServer(t,
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"50","hash":"h","url":"https://v/view?id=h","format":"","task":{"status":"running","message":""}}`)
		},
		func(n int32, w http.ResponseWriter) {
			if n == 1 {
				io.WriteString(w, `<html>gateway hiccup</html>`)
				return
			}
			io.WriteString(w, `{"id":"50","hash":"h","title":"a","description":"","format":"sog"}`) // minimal record
		})
	sp, err := PublishFile(context.Background(), oneshotClient(t, srv), oneshotFile(t), state.PublishParams{Title: "a"}, OneShotOptions{PollInterval: 5 * time.Millisecond})
	if err != nil || sp.ID != "50" || sp.URL != "https://v/view?id=h" || publishes.Load() != 1 {
		t.Errorf("PublishFile = %+v, %v after %d publishes; want splat 50 with its link, 1 publish", sp, err, publishes.Load())
	}
}

// TestPublishFileStopsOnUnreadablePublishAnswer: a 2xx publish answer
// without an id may stand for a created splat: never publish again.
func TestPublishFileStopsOnUnreadablePublishAnswer(t *testing.T) {
	t.Parallel()
	srv, publishes, _ := oneshotServer(t,
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"splat":{"id":50}}`)
		},
		func(int32, http.ResponseWriter) {})
	_, err := PublishFile(context.Background(), oneshotClient(t, srv), oneshotFile(t), state.PublishParams{Title: "a"}, OneShotOptions{PollInterval: 5 * time.Millisecond})
	if err == nil || publishes.Load() != 1 {
		t.Errorf("PublishFile err = %v after %d publishes; want an error after exactly 1", err, publishes.Load())
	}
}

// instantClock is a OneShotOptions clock whose waits end at once; it records
// the delays the retry rule asked for.
type instantClock struct {
	mu     sync.Mutex
	waited []time.Duration
}

func (c *instantClock) after(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waited = append(c.waited, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

// TestPublishFileRetriesTimeoutAndStalledPut: `splatd publish` follows the
// daemon's retry rule. An API call that times out and a storage PUT that
// stalls (storage never answers) are retried, not fatal, as they are for the
// daemon; the retries wait on the injected clock.
func TestPublishFileRetriesTimeoutAndStalledPut(t *testing.T) {
	t.Parallel()
	var signs, puts, publishes atomic.Int32
	// A handler that blocks must end when the test does, or srv.Close
	// (which waits for handlers) would hang the test instead of failing it.
	stop := make(chan struct{})
	hang := func(r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/upload/signed-url":
			if signs.Add(1) == 1 {
				hang(r) // never answers: the client's timeout ends it
				return
			}
			io.WriteString(w, `{"signedUrl":"`+srv.URL+`/storage/k?sig=s","storageKey":"k"}`)
		case "/storage/k":
			if puts.Add(1) == 1 {
				io.Copy(io.Discard, r.Body) // takes the bytes, never answers: a stalled PUT
				hang(r)
				return
			}
			io.Copy(io.Discard, r.Body)
		case "/api/splats/publish":
			publishes.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"50","hash":"h","url":"https://v/view?id=h","format":"sog","completedAt":"2026-01-01T00:00:00Z","task":{"status":"complete","message":""}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := api.NewClient(api.ClientOptions{BaseURL: srv.URL, Token: "tok", RootCAs: roots, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	clk := &instantClock{}
	var retries []string
	sp, err := PublishFile(context.Background(), c, oneshotFile(t), state.PublishParams{Title: "a"}, OneShotOptions{
		After: clk.after,
		Stage: func(step, detail string) {
			if step == "retry" {
				retries = append(retries, detail)
			}
		},
	})
	if err != nil || sp.ID != "50" {
		t.Fatalf("PublishFile = %+v, %v; want splat 50 after retries %q", sp, err, retries)
	}
	if signs.Load() != 2 || puts.Load() != 2 || publishes.Load() != 1 || len(retries) != 2 {
		t.Errorf("signs %d, puts %d, publishes %d, retries %q; want 2, 2, 1 and two retries", signs.Load(), puts.Load(), publishes.Load(), retries)
	}
	clk.mu.Lock()
	defer clk.mu.Unlock()
	for _, d := range clk.waited {
		if d < time.Second { // DefaultBackoff: 2 s with equal jitter
			t.Errorf("waited %v; want the daemon's backoff (1–2 s at the first retry)", d)
		}
	}
}

package uploader

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
	"github.com/splatd/splatd/uploader/splatfile"
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
	var b bytes.Buffer
	if err := splatfile.WritePLY(&b, 10); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "a.ply")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// instantRun runs PublishOne with every retry due at once: it records the
// retries the run told and the delays the retry rule asked for, unwaited.
type instantRun struct {
	mu      sync.Mutex
	retries []string
	waited  []time.Duration
}

func (ir *instantRun) publish(c *api.Client, path string, o PoolOptions, r OneShot) (state.Job, error) {
	o.Client = c
	if sf, _ := o.Files.(SidecarFiles); sf.Publish.Title == "" {
		editPublish(&o, func(pp *state.PublishParams) { pp.Title = "a" })
	}
	stage := r.Stage
	r.instant = true
	r.waited = func(d time.Duration) {
		ir.mu.Lock()
		ir.waited = append(ir.waited, d)
		ir.mu.Unlock()
	}
	r.Stage = func(step, detail string) {
		if step == "retry" {
			ir.mu.Lock()
			ir.retries = append(ir.retries, detail)
			ir.mu.Unlock()
		}
		if stage != nil {
			stage(step, detail)
		}
	}
	return PublishOne(context.Background(), o, path, r)
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

// TestPublishOneSurvivesAnUnreadablePoll: one unreadable poll answer (a
// proxy's page) is asked again, not a reason to give up on a splat that
// exists (a user would re-run the command and publish twice).
func TestPublishOneSurvivesAnUnreadablePoll(t *testing.T) {
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
	j, err := new(instantRun).publish(oneshotClient(t, srv), oneshotFile(t), PoolOptions{}, OneShot{})
	if err != nil || j.SplatID != "50" || j.ViewerURL != "https://v/view?id=h" || publishes.Load() != 1 {
		t.Errorf("PublishOne = %+v, %v after %d publishes; want splat 50 with its link, 1 publish", j, err, publishes.Load())
	}
}

// TestPublishOneStopsOnUnreadablePublishAnswer: a 2xx publish answer
// without an id may stand for a created splat: never publish again.
func TestPublishOneStopsOnUnreadablePublishAnswer(t *testing.T) {
	t.Parallel()
	srv, publishes, _ := oneshotServer(t,
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"splat":{"id":50}}`)
		},
		func(int32, http.ResponseWriter) {})
	j, err := new(instantRun).publish(oneshotClient(t, srv), oneshotFile(t), PoolOptions{}, OneShot{})
	if err == nil || j.Stage != state.Held || publishes.Load() != 1 {
		t.Errorf("PublishOne = %s, %v after %d publishes; want it held with an error after exactly 1", j.Stage, err, publishes.Load())
	}
}

// TestPublishOneRetriesTimeoutAndStalledPut: `splatd publish` follows the
// daemon's retry rule. An API call that times out and a storage PUT that
// stalls (storage never answers) are retried, not fatal, as they are for the
// daemon; the retry rule's delays are recorded, not waited.
func TestPublishOneRetriesTimeoutAndStalledPut(t *testing.T) {
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
		case "/api/splats/50":
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
	ir := &instantRun{}
	j, err := ir.publish(c, oneshotFile(t), PoolOptions{}, OneShot{})
	if err != nil || j.SplatID != "50" {
		t.Fatalf("PublishOne = %+v, %v; want splat 50 after retries %q", j, err, ir.retries)
	}
	if signs.Load() != 2 || puts.Load() != 2 || publishes.Load() != 1 || len(ir.retries) != 2 {
		t.Errorf("signs %d, puts %d, publishes %d, retries %q; want 2, 2, 1 and two retries", signs.Load(), puts.Load(), publishes.Load(), ir.retries)
	}
	if len(ir.waited) != 2 {
		t.Errorf("waited %v; want the two retries' delays", ir.waited)
	}
	for _, d := range ir.waited {
		if d < time.Second { // DefaultBackoff: 2 s with equal jitter
			t.Errorf("waited %v; want the daemon's backoff (1–2 s at the first retry)", d)
		}
	}
}

// TestPublishOneStopsWhereThePoolWouldPause: a refused token (401) or a
// configuration error (a certificate that does not verify) would pause a
// daemon's pool until it clears; nothing clears it in a one-shot, so the
// run ends with that error at once, after one request.
func TestPublishOneStopsWhereThePoolWouldPause(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		trusted bool // the client trusts the server's certificate
		check   func(error) bool
	}{
		{"token refused", true, func(err error) bool {
			var ae *api.APIError
			return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
		}},
		{"certificate", false, func(err error) bool { return errors.As(err, new(*tls.CertificateVerificationError)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
			}))
			t.Cleanup(srv.Close)
			client := oneshotClient(t, srv)
			if !c.trusted {
				var err error
				if client, err = api.NewClient(api.ClientOptions{BaseURL: srv.URL, Token: "tok", Timeout: 5 * time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			j, err := new(instantRun).publish(client, oneshotFile(t), PoolOptions{}, OneShot{})
			if !c.check(err) || j.Stage.Final() {
				t.Errorf("PublishOne = %s, %v; want the pause's error, the job unfinished", j.Stage, err)
			}
			if want := map[bool]int32{true: 1, false: 0}[c.trusted]; requests.Load() != want {
				t.Errorf("%d requests reached the server, want %d", requests.Load(), want)
			}
		})
	}
}

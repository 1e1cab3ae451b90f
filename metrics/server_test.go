package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// startServer runs a server on a free loopback port until the test ends.
func startServer(t *testing.T, ready func() error) *Server {
	t.Helper()
	reg, m := NewRegistry("test", testRoutes)
	m.FileDiscovered()
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Ready: ready, Logger: zerolog.Nop()})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	})
	return s
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	t.Parallel()
	var reason atomic.Pointer[string] // nil = ready
	refused := "token refused by the API"
	reason.Store(&refused)
	s := startServer(t, func() error {
		if r := reason.Load(); r != nil {
			return errors.New(*r)
		}
		return nil
	})
	base := "http://" + s.Addr()

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}

	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "token refused by the API") {
		t.Errorf("/readyz not ready = %d %q, want 503 with the reason", code, body)
	}
	// Liveness must not follow readiness: restarting would not fix the token.
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while not ready = %d, want 200", code)
	}

	reason.Store(nil)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz ready = %d %q, want 200", code, body)
	}

	code, body = get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"splatd_files_discovered_total 1", "splatd_build_info{", "go_goroutines ", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if code, _ := get(t, base+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}
}

func TestServerNilReadyIsReady(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	if code, _ := get(t, "http://"+s.Addr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
}

func TestServerAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: ln.Addr().String(), Registry: reg, Logger: zerolog.Nop()})
	// Run must return the listen error itself rather than serve nothing
	// until ctx ends; this context never ends.
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Run on a busy address = %v, want a listen error naming it", err)
	}
	if s.Addr() != "" {
		t.Errorf("Addr after failed listen = %q, want empty", s.Addr())
	}
}

func TestServerNilRegistry(t *testing.T) {
	t.Parallel()
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0"})
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("Run without a registry succeeded")
	}
}

func TestServerRunReturnsOnCancel(t *testing.T) {
	t.Parallel()
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Run listens first (so a listen error would still show), then sees
	// the cancelled context and shuts down cleanly.
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// TestReadyzDegraded: a daemon that publishes but whose after-actions fail
// stays ready (200) and says "degraded: REASON"; not-ready wins over it.
func TestReadyzDegraded(t *testing.T) {
	t.Parallel()
	var notReady atomic.Bool
	reg := prometheus.NewRegistry()
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(),
		Ready: func() error {
			if notReady.Load() {
				return errors.New("configuration error (tls)")
			}
			return nil
		},
		Degraded: func() error { return errors.New("after-actions failing for 1 job(s)") },
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	code, body := get(t, "http://"+s.Addr()+"/readyz")
	if code != http.StatusOK || body != "degraded: after-actions failing for 1 job(s)\n" {
		t.Errorf("/readyz = %d %q, want 200 degraded: …", code, body)
	}
	notReady.Store(true)
	if code, body := get(t, "http://"+s.Addr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "tls") {
		t.Errorf("/readyz = %d %q, want 503 with the configuration error", code, body)
	}
}

// TestStartLineNamesStatusPage: the line logged when the listener is up
// names the status page with its address, /api/status and /api/jobs
// besides /metrics, /healthz and /readyz.
func TestStartLineNamesStatusPage(t *testing.T) {
	t.Parallel()
	reg, _ := NewRegistry("test", testRoutes)
	var logs syncLog
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.New(&logs), Status: sampleSource()})
	runServer(t, s)
	// Run logs the line before it serves: once /healthz answers, it is there.
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	line := logs.String()
	for _, want := range []string{"/metrics", "/healthz", "/readyz", "the status page /", "/api/status", "/api/jobs",
		`"status_page":"http://` + s.Addr() + `/"`, `"status":"open (loopback)"`} {
		if !strings.Contains(line, want) {
			t.Errorf("start line lacks %s: %s", want, line)
		}
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

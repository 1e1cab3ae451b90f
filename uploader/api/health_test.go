package api

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestClientUnreachable: API calls that get no answer or a 5xx in a row
// make the API unreachable, since the first of them; any other answer (a
// 401 too) ends it.
func TestClientUnreachable(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, int(status.Load()), `{"id":"u1","error":"down"}`)
	}))
	ctx := context.Background()
	if err, _ := c.Unreachable(); err != nil {
		t.Fatalf("before any call: %v", err)
	}
	_, _ = c.Me(ctx)
	err1, since1 := c.Unreachable()
	if err1 == nil || since1.IsZero() {
		t.Fatalf("after a 503: %v since %v, want unreachable", err1, since1)
	}
	_, _ = c.Me(ctx)
	if err2, since2 := c.Unreachable(); err2 == nil || !since2.Equal(since1) {
		t.Fatalf("after a second 503: %v since %v, want since the first (%v)", err2, since2, since1)
	}
	status.Store(http.StatusUnauthorized)
	_, _ = c.Me(ctx)
	if err, _ := c.Unreachable(); err != nil {
		t.Fatalf("after a 401: %v, want reachable (the token pause reports it)", err)
	}
}

// TestClientNetErrorReadable: a transport error names the route, the host
// and the cause in one line, not the request's method and URL.
func TestClientNetErrorReadable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newTestClient(t, "https://"+addr, nil, 0)
	_, err = c.Me(context.Background())
	if err == nil {
		t.Fatal("no error from a closed port")
	}
	want := "v1_me: cannot reach " + addr + ": connection refused"
	if got := err.Error(); got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	if u, _ := c.Unreachable(); u == nil {
		t.Error("a refused connection did not make the API unreachable")
	}
}

// TestClientSetRootCAs: a client whose roots do not hold the server's CA
// fails TLS verification, readably; given the right roots, it connects.
func TestClientSetRootCAs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, `{"id":"u1","username":"a"}`)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(ClientOptions{BaseURL: srv.URL, Token: testToken, RootCAs: x509.NewCertPool()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Me(context.Background())
	if err == nil || !strings.Contains(err.Error(), "signed by an unknown authority") {
		t.Fatalf("with empty roots: %v, want an unknown authority", err)
	}
	c.SetRootCAs(testRoots())
	if _, err := c.Me(context.Background()); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/cmd/internal/configtest"
)

// startupConfig writes a config whose every part but extra is valid and
// local (configtest.Write). It returns the path.
func startupConfig(t *testing.T, token, extra string) string {
	return configtest.Write(t, token, extra)
}

// runStart runs `splatd run -config cfg` as main does (dispatch), which must
// fail at start-up: it returns the exit code and stderr.
func runStart(t *testing.T, cfg string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := dispatch(ctx, c, []string{"run", "-config", cfg})
	return code, stderr.String()
}

// A metrics port another process holds is a start-up error that names the
// key and the address, and exits 1; it used to panic in closeAll(nil).
func TestStartupBusyMetricsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	cfg := startupConfig(t, "tok-"+strings.Repeat("x", 20), fmt.Sprintf("metrics: {listen: %q}\n", addr))
	code, stderr := runStart(t, cfg)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
	if !strings.Contains(stderr, "metrics.listen") || !strings.Contains(stderr, addr) || !strings.Contains(stderr, "cannot start") ||
		!strings.Contains(stderr, "another program holds") {
		t.Fatalf("the error does not name metrics.listen and %s:\n%s", addr, stderr)
	}
	// The state was closed: a second start fails for the port again, not
	// for a state dir still locked by the first.
	if code, stderr = runStart(t, cfg); code != exitFailure || strings.Contains(stderr, "another splatd") {
		t.Fatalf("second start: exit %d:\n%s", code, stderr)
	}
}

// A webhook headers file that holds the API token is refused at start-up
// with the key named (and the token not), exit 1, no panic.
func TestStartupWebhookHeadersHoldToken(t *testing.T) {
	token := "tok-" + strings.Repeat("s", 24)
	hdr := filepath.Join(t.TempDir(), "headers")
	if err := os.WriteFile(hdr, []byte("Authorization: Bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := startupConfig(t, token, fmt.Sprintf("notify: {webhook: \"https://hooks.example/x\", webhook_headers_file: %q}\nmetrics: {listen: \"\"}\n", hdr))
	code, stderr := runStart(t, cfg)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
	if !strings.Contains(stderr, "notify.webhook_headers_file") || strings.Contains(stderr, token) {
		t.Fatalf("the error does not name notify.webhook_headers_file, or shows the token:\n%s", stderr)
	}
}

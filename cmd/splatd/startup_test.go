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
)

// startupConfig writes a config whose every part but extra is valid and
// local: a watch folder, a state dir, a token file. It returns the path.
func startupConfig(t *testing.T, token, extra string) string {
	t.Helper()
	dir := t.TempDir()
	inbox, tokenFile := filepath.Join(dir, "inbox"), filepath.Join(dir, "token")
	if err := os.MkdirAll(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("api:\n  base_url: https://127.0.0.1:1\n  token_file: %s\nwatch:\n  - path: %s\nstate_dir: %s\nlog: {format: json}\n%s",
		tokenFile, inbox, filepath.Join(dir, "state"), extra)
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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

package daemon

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestReadyzAPIUnreachable: an idle daemon whose API does not answer is
// not ready once the grace has passed, and says why in one line (the
// route, the host and the cause), on /readyz and in Reason. Before, it
// stayed ready while every call failed.
func TestReadyzAPIUnreachable(t *testing.T) {
	cfg := testConfig(t, "tok-"+strings.Repeat("u", 20), "metrics: {listen: \"127.0.0.1:0\"}\nrescan_interval: 0s\n")
	d, err := Open(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.apiGrace = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	const want = "cannot reach 127.0.0.1:1: connection refused"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + d.metrics.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q, want 503 naming %q", resp.StatusCode, b, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := d.Reason()
	if !strings.Contains(r, "the API has not answered for") || !strings.Contains(r, want) || strings.Contains(r, "\n") {
		t.Errorf("Reason = %q, want one line naming the API and %q", r, want)
	}
}

// TestCAFileReread: a changed api.ca_file is taken by the client without
// a restart; an unchanged one is not taken again.
func TestCAFileReread(t *testing.T) {
	sim, err := apisim.New(apisim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	ca := filepath.Join(t.TempDir(), "ca.pem")
	other, err := apisim.New(apisim.Options{}) // another CA: the server's does not verify
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	copyFile(t, other.CAFile(), ca)
	cfg := testConfig(t, sim.Token(), "")
	cfg.API.BaseURL, cfg.API.CAFile = sim.URL(), ca
	d, err := Open(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.client.Me(context.Background()); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("with another CA: %v, want an unknown authority", err)
	}
	if took, err := d.applyCA(cfg); took || err != nil {
		t.Fatalf("unchanged ca_file taken again: %v, %v", took, err)
	}
	copyFile(t, sim.CAFile(), ca) // the operator put the right CA there
	if took, err := d.applyCA(cfg); !took || err != nil {
		t.Fatalf("changed ca_file not taken: %v, %v", took, err)
	}
	if _, err := d.client.Me(context.Background()); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWrongTokenAtStart: an idle daemon (no file, no job) with a token the
// API refuses logs it and is not ready as it starts: the token is probed
// at start. Before, it said nothing until the first file arrived.
func TestWrongTokenAtStart(t *testing.T) {
	sim, err := apisim.New(apisim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	cfg := testConfig(t, "tok-"+strings.Repeat("w", 20), "metrics: {listen: \"127.0.0.1:0\"}\nrescan_interval: 0s\n")
	cfg.API.BaseURL, cfg.API.CAFile = sim.URL(), sim.CAFile()
	var logs lockedLog
	d, err := Open(cfg, Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.Reason(), "the API refuses the token") {
		if time.Now().After(deadline) {
			t.Fatalf("Reason = %q, want the refused token", d.Reason())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "the API refuses the token") {
		t.Errorf("no error line for the refused token:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "tok-wwww") {
		t.Error("the token is in the log")
	}
}

// lockedLog is a log sink safe for the daemon's goroutines and the test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReloadCAFile: a reload that names a new api.ca_file applies it at
// once (not "needs a restart"): the client verifies the server with it.
func TestReloadCAFile(t *testing.T) {
	sim, err := apisim.New(apisim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	other, err := apisim.New(apisim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(sim.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inbox := filepath.Join(dir, "inbox")
	if err := os.MkdirAll(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	write := func(ca string) {
		cfg := "api: {base_url: " + sim.URL() + ", token_file: " + token + ", ca_file: " + ca + "}\nwatch:\n  - path: " + inbox +
			"\nstate_dir: " + filepath.Join(dir, "state") + "\nmetrics: {listen: \"\"}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(other.CAFile())
	cfg, err := config.Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(cfg, Options{ConfigPath: path, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.client.Me(context.Background()); err == nil {
		t.Fatal("another CA verified the server")
	}
	write(sim.CAFile())
	res := d.reload()
	if len(res.Errors) > 0 || !slices.Contains(res.Applied, "api.ca_file") || slices.Contains(res.Restart, "api.ca_file") {
		t.Fatalf("reload: %+v, want api.ca_file applied", res)
	}
	if _, err := d.client.Me(context.Background()); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
}

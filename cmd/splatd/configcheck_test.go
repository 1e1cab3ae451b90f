package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
)

// checkConfig runs `splatd config check` in-process.
func checkConfig(t *testing.T, cfg string, extra ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	code := dispatch(context.Background(), &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }},
		append([]string{"config", "check", "-config", cfg}, extra...))
	return code, out.String(), errb.String()
}

// TestConfigCheckWarns: issue 15's fourth case. Watch paths that are
// missing, relative, files or overlapping are warned about (exit 0: the
// daemon starts and waits); a state directory the daemon cannot create is
// an error (exit 1), as it is for `splatd run`.
func TestConfigCheckWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	file := filepath.Join(dir, "a-file.ply")
	outer := filepath.Join(dir, "outer")
	for _, p := range []string{token, file} {
		if err := os.WriteFile(p, []byte("tok\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(outer, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, stateDir string) string {
		p := filepath.Join(dir, name)
		cfg := fmt.Sprintf("api: {token_file: %s}\nwatch:\n  - path: %s\n  - path: %s\n  - path: %s\n  - path: %s\n  - path: relative/inbox\nstate_dir: %s\n",
			token, filepath.Join(dir, "missing"), file, outer, filepath.Join(outer, "inner"), stateDir)
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	code, _, stderr := checkConfig(t, write("warn.yaml", filepath.Join(dir, "state")))
	if code != 0 {
		t.Errorf("exit %d, want 0 (warnings only):\n%s", code, stderr)
	}
	for _, want := range []string{
		"warning: watch[0].path: " + filepath.Join(dir, "missing") + " does not exist",
		"warning: watch[1].path: " + file + " is not a folder",
		"warning: watch[2].path and watch[3].path overlap",
		"warning: watch[4].path: \"relative/inbox\" is relative",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	code, _, stderr = checkConfig(t, write("fatal.yaml", filepath.Join(file, "state")))
	if code != 1 || !strings.Contains(stderr, "error: state_dir: ") {
		t.Errorf("state_dir under a file: exit %d, want 1 with an error line:\n%s", code, stderr)
	}
}

// TestSimConfigPassesCheck: the config `splatd sim` prints is complete (a
// watch folder, a state directory) and passes `config check -probe`.
func TestSimConfigPassesCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, []string{"sim", "-dir", dir})
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the simulator to print its config", func() bool { return strings.Contains(out.String(), "Ctrl-C") })
	code, stdout, stderr := checkConfig(t, filepath.Join(dir, "config.yaml"), "-probe")
	if code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("config check -probe of the sim's config: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "storage host") || !strings.Contains(stdout, "watch:") {
		t.Errorf("config check output:\n%s", stdout)
	}
	// A fixed metrics port: the status page is at the same address at
	// every start, and sim says where.
	cfg, err := config.Load(filepath.Join(dir, "config.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Listen != "127.0.0.1:9465" {
		t.Errorf("sim's config: metrics.listen = %q; want the fixed 127.0.0.1:9465", cfg.Metrics.Listen)
	}
	if !strings.Contains(out.String(), "open http://127.0.0.1:9465/") {
		t.Errorf("sim does not name the status page:\n%s", out.String())
	}
}

// TestSimFlagsShapeTheAccount: `splatd sim`'s flags give the account a
// user wants to try the daemon on: -limit and -class make a strict class
// of 2 per window holding the publish route (its third request in a window
// is a 429 announced by the headers), -error-rate 1 fails every API
// request with the server's error text, and the flags are printed back.
func TestSimFlagsShapeTheAccount(t *testing.T) {
	t.Parallel()
	var token string
	run := func(args ...string) (base, printed string, hc *http.Client, stop func()) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- dispatch(ctx, &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, append([]string{"sim", "-dir", dir}, args...))
		}()
		stop = func() { cancel(); <-done }
		waitFor(t, "the simulator to print its config", func() bool { return strings.Contains(out.String(), "Ctrl-C") })
		for _, l := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(l, "base_url:"); ok {
				base = strings.TrimSpace(v)
			}
		}
		pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		token = strings.TrimSpace(string(tok))
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		return base, out.String(), hc, stop
	}
	do := func(hc *http.Client, method, url string) (*http.Response, string) {
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	base, printed, hc, stop := run("-limit", "strict=2", "-class", "publish=strict", "-window", "1h")
	defer stop()
	if !strings.Contains(printed, "limits:     normal 240, strict 2 (publish), assets 120 per 1h0m0s\n") {
		t.Errorf("sim does not print the limits asked for:\n%s", printed)
	}
	var last *http.Response
	for range 3 {
		last, _ = do(hc, http.MethodPost, base+"/api/splats/publish")
	}
	if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("X-RateLimit-Limit") != "2" {
		t.Errorf("the third publish in a window: %s, X-RateLimit-Limit %q; want 429 and 2", last.Status, last.Header.Get("X-RateLimit-Limit"))
	}
	if resp, _ := do(hc, http.MethodGet, base+"/api/splats/1"); resp.Header.Get("X-RateLimit-Limit") != "240" {
		t.Errorf("a poll's class limit = %q, want the normal class's 240", resp.Header.Get("X-RateLimit-Limit"))
	}

	base, printed, hc, stop2 := run("-error-rate", "1", "-latency", "1ms")
	defer stop2()
	if !strings.Contains(printed, "faults: API errors 100%, latency 1ms") {
		t.Errorf("sim does not print the faults asked for:\n%s", printed)
	}
	if resp, body := do(hc, http.MethodGet, base+"/api/splats/1"); resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, `"error"`) {
		t.Errorf("with -error-rate 1: %s %s, want 500 with an error body", resp.Status, body)
	}
}

// TestSimRestartKeepsTheFolder: `splatd sim -dir D` started again on D
// keeps its token, its CA and its address, so a daemon configured from D
// goes on working; a config.yaml the user edited is never overwritten: the
// simulator's goes beside it, and it says so. Before, a restart made a new
// token and CA and rewrote config.yaml.
func TestSimRestartKeepsTheFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() (stdout, stderr *syncBuffer, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- dispatch(ctx, &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, []string{"sim", "-dir", dir})
		}()
		waitFor(t, "the simulator to print its config", func() bool { return strings.Contains(out.String(), "Ctrl-C") })
		return &out, &errb, func() { cancel(); <-done }
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	_, _, stop := start()
	token, ca, cfg := read("token"), read("ca.pem"), read("config.yaml")
	stop()

	// Unchanged, config.yaml is the simulator's to keep up to date.
	_, _, stop = start()
	if read("token") != token || read("ca.pem") != ca || read("config.yaml") != cfg {
		t.Errorf("a restart changed the token, the CA or the config:\n%s", read("config.yaml"))
	}
	code, stdout, stderr := checkConfig(t, filepath.Join(dir, "config.yaml"), "-probe")
	if code != 0 {
		t.Errorf("config check -probe after the restart: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stop()

	// Edited by the user, it is kept; the simulator's goes beside it.
	edited := cfg + "workers: 3\n"
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, stop := start()
	defer stop()
	if read("config.yaml") != edited {
		t.Errorf("the edited config.yaml was overwritten:\n%s", read("config.yaml"))
	}
	if read("config.sim.yaml") != cfg || !strings.Contains(errOut.String(), "config.sim.yaml") {
		t.Errorf("config.sim.yaml %q; stderr %q; want the simulator's config beside, named", read("config.sim.yaml"), errOut.String())
	}
	if code, stdout, stderr := checkConfig(t, filepath.Join(dir, "config.yaml"), "-probe"); code != 0 {
		t.Errorf("config check -probe of the edited config: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

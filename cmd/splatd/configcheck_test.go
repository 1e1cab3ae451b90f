package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

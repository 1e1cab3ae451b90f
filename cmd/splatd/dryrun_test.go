package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDryRun: every finished file gets one line (would publish, duplicate,
// invalid) with its sha256 and title; no token is needed, no API is called
// (the base URL does not resolve) and the state directory is never made.
func TestDryRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	stateDir := filepath.Join(dir, "state")
	writePLY(t, filepath.Join(inbox, "scan.ply"), 1000)
	writePLY(t, filepath.Join(inbox, "copy.ply"), 1000)
	if err := os.WriteFile(filepath.Join(inbox, "broken.ply"), []byte("not a splat at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	writeConfig(t, cfgPath, fmt.Sprintf("api: {base_url: https://api.invalid}\nwatch:\n  - path: %s\nsettle: 50ms\nstate_dir: %s\n"+
		"publish: {title: \"T-{{.Stem}}\"}\nlog: {format: json}\nmetrics: {listen: \"\"}\n", inbox, stateDir))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	c := &cli{stdout: &stdout, stderr: stderr, getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- dispatch(ctx, c, []string{"run", "-dry-run", "-config", cfgPath}) }()
	waitFor(t, "a line for each of the three files", func() bool {
		return strings.Count(stderr.String(), `"message":"dry run: `) >= 4 // the start line and three files
	})
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d; log:\n%s", code, stderr.String())
	}
	log := stderr.String()
	if !strings.Contains(log, `"title":"T-scan"`) && !strings.Contains(log, `"title":"T-copy"`) {
		t.Errorf("no would-publish line with the title:\n%s", log)
	}
	for _, want := range []string{`"sha256":"`, "would publish", "same content as another file", "would fail"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if want := "1 file(s) would be published"; !strings.Contains(stdout.String(), want) || !strings.Contains(stdout.String(), "1 duplicate(s), 1 invalid") {
		t.Errorf("summary %q, want %q with 1 duplicate and 1 invalid", stdout.String(), want)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the dry run touched the state directory: %v", err)
	}
}

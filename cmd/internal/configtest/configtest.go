// Package configtest writes daemon configs for tests: a config whose every
// part but the caller's extra YAML is valid and local (a watch folder, a
// state directory, a token file) under a test's temporary directory.
package configtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Write writes such a config with token in its token file and extra
// appended, and returns the config file's path.
func Write(t testing.TB, token, extra string) string {
	t.Helper()
	dir := t.TempDir()
	inbox, tokenFile := filepath.Join(dir, "inbox"), filepath.Join(dir, "token")
	if err := os.MkdirAll(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("api:\n  base_url: https://127.0.0.1:1\n  token_file: %s\nwatch:\n  - path: %s\nstate_dir: %s\nlog: {format: json}\n%s",
		tokenFile, inbox, filepath.Join(dir, "state"), extra)
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

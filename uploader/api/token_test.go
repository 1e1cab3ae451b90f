package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("  secret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "splatd-token"), []byte("secret-cred\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	tests := []struct {
		name      string
		tokenFile string
		env       map[string]string
		want      string
		wantErr   string
	}{
		{"file wins", file, map[string]string{"SPLATD_TOKEN": "env"}, "secret-from-file", ""},
		{"env next", "", map[string]string{"SPLATD_TOKEN": "secret-env", "CREDENTIALS_DIRECTORY": creds}, "secret-env", ""},
		{"credential last", "", map[string]string{"CREDENTIALS_DIRECTORY": creds}, "secret-cred", ""},
		{"none", "", nil, "", "no API token"},
		{"missing file", filepath.Join(dir, "nope"), nil, "", "api.token_file: cannot read the token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := LoadToken(tt.tokenFile, env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || tok.Value() != tt.want {
				t.Fatalf("LoadToken = %v; want %q", err, tt.want)
			}
			if strings.Contains(tok.Origin(), tok.Value()) || strings.Contains(tok.Advice(), tok.Value()) {
				t.Errorf("origin %q or advice leaks the token", tok.Origin())
			}
		})
	}
}

// TestTokenReload: only a change of the file counts; an unreadable file
// keeps the token in use.
func TestTokenReload(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadToken(file, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := tok.Reload(); changed || err != nil {
		t.Errorf("Reload of an unchanged file = %v, %v", changed, err)
	}
	if err := os.WriteFile(file, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := tok.Reload(); !changed || err != nil || tok.Value() != "two" {
		t.Errorf("Reload after a change = %v, %v, token %q", changed, err, tok.Value())
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if changed, err := tok.Reload(); changed || err == nil || tok.Value() != "two" {
		t.Errorf("Reload of a vanished file = %v, %v, token %q; want an error and the old token", changed, err, tok.Value())
	}
	if !strings.Contains(tok.Advice(), file) {
		t.Errorf("advice %q does not name the file", tok.Advice())
	}
}

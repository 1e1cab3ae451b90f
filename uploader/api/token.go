package api

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Token is the API token and where it was read from: the one place that
// knows the token's source, whether it can change under a running process,
// and what an operator must do when the API refuses it. The client reads
// the token from it for every request; the worker pool's prober reloads it
// while the API refuses it, so that fixing a token file needs no restart.
type Token struct {
	file   string              // api.token_file, or ""
	getenv func(string) string // the environment (SPLATD_TOKEN, CREDENTIALS_DIRECTORY)

	mu     sync.RWMutex
	value  string // never logged, never in an error
	origin string // where value was read: a path, or a sentence naming the variable
	env    bool   // value came from SPLATD_TOKEN
}

// Where a token comes from when api.token_file is empty.
const (
	TokenEnv        = "SPLATD_TOKEN"
	TokenCredential = "splatd-token" // the systemd credential's name (LoadCredential=)
)

// LoadToken finds the API token: file (api.token_file) if set, else the
// SPLATD_TOKEN environment variable, else the systemd credential
// $CREDENTIALS_DIRECTORY/splatd-token.
func LoadToken(file string, getenv func(string) string) (*Token, error) {
	t := &Token{file: file, getenv: getenv}
	value, origin, env, err := t.read()
	if err != nil {
		return nil, err
	}
	t.value, t.origin, t.env = value, origin, env
	return t, nil
}

// StaticToken is a token that never changes (tests, the simulator).
func StaticToken(value string) *Token {
	return &Token{value: strings.TrimSpace(value), origin: "the command line"}
}

func (t *Token) read() (value, origin string, env bool, err error) {
	if t.getenv == nil {
		return t.value, t.origin, t.env, nil // static
	}
	readFile := func(path, key string) (string, string, bool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", false, fmt.Errorf("%s: cannot read the token: %w", key, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", "", false, fmt.Errorf("%s: the token file %s is empty", key, path)
		}
		if strings.ContainsAny(tok, "\r\n\t\x00 ") {
			return "", "", false, fmt.Errorf("%s: the token file %s holds more than one word", key, path)
		}
		return tok, path, false, nil
	}
	if t.file != "" {
		return readFile(t.file, "api.token_file")
	}
	if tok := strings.TrimSpace(t.getenv(TokenEnv)); tok != "" {
		if strings.ContainsAny(tok, "\r\n\t\x00 ") {
			return "", "", false, errors.New("the SPLATD_TOKEN environment variable holds more than one word")
		}
		return tok, "the SPLATD_TOKEN environment variable", true, nil
	}
	if dir := t.getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		p := filepath.Join(dir, TokenCredential)
		if _, err := os.Stat(p); err == nil {
			return readFile(p, "credential "+TokenCredential)
		}
	}
	return "", "", false, errors.New("no API token: set api.token_file, or the SPLATD_TOKEN environment variable, " +
		"or give systemd a credential named splatd-token (LoadCredential=splatd-token:/etc/splatd/token)")
}

// Value is the token to send.
func (t *Token) Value() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.value
}

// Origin names where the token was read, never what it is.
func (t *Token) Origin() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.origin
}

// Reload reads the source again and reports whether the token changed.
// Only a token file can change under a running process (the environment
// and a systemd credential are fixed at start), so for those it is cheap
// and always false. A source that became unreadable keeps the old token.
func (t *Token) Reload() (changed bool, err error) {
	value, origin, env, err := t.read()
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if value == t.value {
		return false, nil
	}
	t.value, t.origin, t.env = value, origin, env
	return true, nil
}

// Advice says how to replace a refused token, fitting its source.
func (t *Token) Advice() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	switch {
	case t.file != "":
		return "write a valid token to " + t.file + ": it is picked up within seconds, no restart"
	case t.env:
		return "set a valid SPLATD_TOKEN and restart splatd"
	case t.getenv == nil:
		return "pass a valid token"
	default:
		return "put a valid token in the credential's source (LoadCredential=, e.g. /etc/splatd/token) and restart: systemctl restart splatd"
	}
}

package notify

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// ReadHeaders reads the extra webhook headers from a file of "Name: value"
// lines (blank lines and lines starting with # are skipped), so that a
// receiver's secret lives in a file of its own, not in the config. Errors
// name the line, never its value.
func ReadHeaders(path string) (http.Header, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || !validName(name) {
			return nil, fmt.Errorf("%s line %d: want \"Name: value\"", path, line)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Content-Type", "Transfer-Encoding", "Connection":
			return nil, fmt.Errorf("%s line %d: %s is set by splatd", path, line, name)
		}
		h.Add(name, value)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// validName reports whether s is an HTTP header name (an RFC 9110 token).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

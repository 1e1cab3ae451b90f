package metrics

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

// A viewer link of an unlisted splat is a capability and file paths name
// clients, so the status endpoints are open only on a loopback listener.
// Elsewhere they answer a request that carries the bearer token of
// status.token_file and nobody else; without a token they are off.
// /metrics, /healthz and /readyz stay open for scrapers and probes.

// maxTokenFile bounds what TokenFile reads: a token is a line, and reading a
// mistakenly configured large file on every request would be a cheap way to
// load the daemon.
const maxTokenFile = 4096

// TokenFile returns a ServerOptions.StatusToken that reads path on every
// call, so that a rotated token applies without a restart. Surrounding
// whitespace (the trailing newline of `echo > file`) is not part of the
// token; an empty file is an error, not an empty token.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("status token: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
		if err != nil {
			return "", fmt.Errorf("status token: %w", err)
		}
		if len(b) > maxTokenFile {
			return "", fmt.Errorf("status token: %s is larger than %d bytes; it should hold one token", path, maxTokenFile)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("status token: %s is empty", path)
		}
		return tok, nil
	}
}

// isLoopback reports whether a bound address accepts connections from this
// host only. The unspecified address (0.0.0.0, ::) is not loopback: it
// listens on every interface.
func isLoopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.IsLoopback()
	}
	return false
}

// localHost reports whether a request's Host names this machine's loopback
// interface. Without this check a web page on another site could read the
// open loopback endpoints through DNS rebinding: its own name, re-resolved
// to 127.0.0.1, makes the browser treat the daemon as same-origin.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guard wraps a status endpoint with the access rule. The listener's
// address is read per request because Listen binds after NewServer.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.loopback.Load() {
			if !localHost(r.Host) {
				denyStatus(w, r, http.StatusForbidden,
					"the status endpoints on a loopback listener answer only requests for localhost or a loopback address (Host header); a proxy must pass Host: localhost")
				return
			}
			h(w, r)
			return
		}
		if s.opts.StatusToken == nil {
			denyStatus(w, r, http.StatusForbidden,
				"the status endpoints are off: this listener is not a loopback address and no status token is configured (status.token_file); /metrics, /healthz and /readyz stay open")
			return
		}
		want, err := s.opts.StatusToken()
		if err != nil {
			s.opts.Logger.Error().Err(err).Msg("status endpoints refused: cannot read the status token")
			denyStatus(w, r, http.StatusForbidden,
				"the status endpoints are off: the status token (status.token_file) cannot be read; see the daemon's log")
			return
		}
		if !tokenMatches(r.Header.Get("Authorization"), want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="splatd status"`)
			denyStatus(w, r, http.StatusUnauthorized,
				"the status endpoints need the header Authorization: Bearer <the token of status.token_file>")
			return
		}
		h(w, r)
	}
}

// tokenMatches compares the bearer credential of header with want in time
// independent of where they differ. Both are hashed first so that the
// comparison does not reveal the token's length either.
func tokenMatches(header, want string) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || want == "" {
		return false
	}
	g := sha256.Sum256([]byte(strings.TrimSpace(got)))
	w := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// denyStatus answers a refused status request: JSON for the API, text for
// the page.
func denyStatus(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSONError(w, code, msg)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

package metrics

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
)

// statusPage is the status page: one static file with its CSS and script
// inline, no build step and nothing fetched from elsewhere. It holds no data;
// its script fetches /api/status and /api/jobs, so the page and the API show
// the same, scrubbed, views.
//
//go:embed status.html
var statusPage []byte

// pageCSP allows exactly the page's own inline style and script (by hash)
// and requests to this origin: even if a path or an error text ever reached
// the document as markup, no injected script would run and nothing could be
// sent elsewhere.
var pageCSP = fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	inlineHash(statusPage, "<script>", "</script>"), inlineHash(statusPage, "<style>", "</style>"))

// inlineHash returns the CSP source expression ('sha256-…' without quotes)
// of the text between the first open and close tags of page. A page without
// them is a build mistake, caught by the package's tests at init.
func inlineHash(page []byte, open, close string) string {
	_, rest, ok := bytes.Cut(page, []byte(open))
	if !ok {
		panic("metrics: status.html has no " + open)
	}
	body, _, ok := bytes.Cut(rest, []byte(close))
	if !ok {
		panic("metrics: status.html has no " + close)
	}
	sum := sha256.Sum256(body)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

func (s *Server) page(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(statusPage)
}

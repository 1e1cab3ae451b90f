package metrics

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// statusPage is the status page: one html/template file with its CSS and
// script inline, no build step and nothing fetched from elsewhere. The
// daemon renders it (pageView, from the same scrubbed views as /api/status
// and /api/jobs, escaped by html/template); its script refreshes it by
// fetching it again. The style and the script hold no template action, so
// their hashes below are those of the page served.
//
//go:embed status.html
var statusPage []byte

var pageTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes": func(n int64) string { return humanBytes(float64(n)) },
}).Parse(string(statusPage)))

// pageCSP allows exactly the page's own inline style and script (by hash)
// and requests to this origin: even if a path or an error text ever reached
// the document as markup, no injected script would run and nothing could be
// sent elsewhere. The hashes are those of the page as rendered (html/template
// drops the script's comments); the style and the script hold no template
// action, so every render has the same.
var pageCSP = func() string {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pageView{}); err != nil {
		panic("metrics: status.html does not render: " + err.Error())
	}
	page := buf.Bytes()
	return fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		inlineHash(page, "<script>", "</script>"), inlineHash(page, "<style>", "</style>"))
}()

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

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, s.pageView(r.Context(), time.Now())); err != nil {
		// A template bug, not a run-time condition; answered, not a panic.
		s.opts.Logger.Error().Err(err).Msg("rendering the status page")
		http.Error(w, "rendering the status page failed; see the daemon's log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

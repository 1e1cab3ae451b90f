package daemon

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/state"
)

// syncBuffer is a log sink the daemon's goroutines write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPageRetryIsTheSocketsRetry: a failed job retried from the status
// page's endpoint is queued again and run again, like `splatd retry` through
// the admin socket, by the same code (the same log line, naming where each
// came from); without the key the page's request is refused and logged.
func TestPageRetryIsTheSocketsRetry(t *testing.T) {
	cfg := testConfig(t, "tok-"+strings.Repeat("p", 20), "metrics: {listen: \"127.0.0.1:0\"}\nsettle: 50ms\n")
	failed := make(chan state.Job, 8)
	var logs syncBuffer
	d, err := Open(cfg, Options{Logger: zerolog.New(&logs), OnTransition: func(j state.Job, _ state.Stage) {
		if j.Stage == state.Failed {
			failed <- j
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if err := os.WriteFile(filepath.Join(cfg.Watch[0].Path, "notes.ply"), []byte("this is not a PLY file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := <-failed
	base := "http://" + d.metrics.Addr()

	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`<meta name="splatd-csrf" content="([0-9a-f]+)">`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("the page has no CSRF token:\n%s", page)
	}
	key, err := os.ReadFile(filepath.Join(cfg.StateDir, metrics.ActionKeyName))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.StateDir, metrics.ActionKeyName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	post := func(key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/api/jobs/"+itoa(j.ID)+"/retry", nil)
		req.Header.Set("Origin", base)
		req.Header.Set("X-CSRF-Token", string(m[1]))
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := post(""); code != http.StatusForbidden || !strings.Contains(body, "refused: no key") {
		t.Errorf("without key: %d %s", code, body)
	}
	if code, body := post(strings.TrimSpace(string(key))); code != http.StatusOK || !strings.Contains(body, `"message":"re-queued 1 job (job `+itoa(j.ID)+`); job `+itoa(j.ID)) ||
		!strings.Contains(body, "it will fail again unless the file changed") {
		t.Fatalf("with the key: %d %s", code, body)
	}
	if again := <-failed; again.ID != j.ID {
		t.Errorf("after the page's retry job %d failed, want job %d run again", again.ID, j.ID)
	}
	if _, _, err := Call(ctx, cfg.StateDir, http.MethodPost, "/v1/retry?id="+itoa(j.ID)); err != nil {
		t.Fatal(err)
	}
	<-failed
	out := logs.String()
	for _, want := range []string{`"via":"status page (127.0.0.1:`, `"via":"admin socket"`, `"message":"status page action refused"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if n := strings.Count(out, `"message":"job queued again by an operator"`); n != 2 {
		t.Errorf("%d log lines of a retry, want 2 (page, socket):\n%s", n, out)
	}
	var texts []string
	for _, e := range d.history.List() {
		texts = append(texts, e.Text)
	}
	if h := strings.Join(texts, "\n"); !strings.Contains(h, "retry by an operator, via status page (127.0.0.1:") || !strings.Contains(h, "queued → failed: ") ||
		!strings.Contains(h, "file found, 23 B") {
		t.Errorf("event history:\n%s", h)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestPageRetryInBrowser: the operator's click. In headless Chromium, the
// key from the state directory typed into the page, the failed job's retry
// button queues it again in the daemon's store: its worker runs it again.
// Without chromium it skips, unless SPLATD_REQUIRE_BROWSER=1.
func TestPageRetryInBrowser(t *testing.T) {
	ctx := browserTab(t)
	cfg := testConfig(t, "tok-"+strings.Repeat("b", 20), "metrics: {listen: \"127.0.0.1:0\"}\nsettle: 50ms\n")
	failed := make(chan state.Job, 8)
	d, err := Open(cfg, Options{Logger: zerolog.Nop(), OnTransition: func(j state.Job, _ state.Stage) {
		if j.Stage == state.Failed {
			failed <- j
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if err := os.WriteFile(filepath.Join(cfg.Watch[0].Path, "notes.ply"), []byte("this is not a PLY file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := <-failed
	key, err := os.ReadFile(filepath.Join(cfg.StateDir, metrics.ActionKeyName))
	if err != nil {
		t.Fatal(err)
	}
	retry := chromedp.CSS(`#failures tr[data-job="` + itoa(j.ID) + `"] button[data-op="retry"]`)
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+d.metrics.Addr()+"/"),
		chromedp.WaitVisible(retry),
		chromedp.Click(chromedp.CSS(`#keybar summary`)),
		chromedp.SendKeys(chromedp.CSS(`#key`), strings.TrimSpace(string(key))),
		chromedp.Click(chromedp.CSS(`#key-save`)),
		chromedp.Click(retry),
	); err != nil {
		t.Fatalf("retrying from the page: %v", err)
	}
	flash, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const f = document.getElementById("flash"); return f.className !== "muted" && f.textContent; })()`))
	if err != nil || !strings.HasPrefix(flash, "re-queued 1 job (job "+itoa(j.ID)+"); ") || !strings.HasSuffix(flash, "it will fail again unless the file changed") {
		t.Fatalf("the page says %q (%v)", flash, err)
	}
	if again := <-failed; again.ID != j.ID {
		t.Errorf("job %d failed after the retry, want job %d run again", again.ID, j.ID)
	}
}

// browserTab starts a headless Chromium for the test and opens a tab.
func browserTab(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("SPLATD_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium is not installed and SPLATD_REQUIRE_BROWSER=1")
		}
		t.Skip("chromium is not installed; set SPLATD_REQUIRE_BROWSER=1 to make this a failure")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancel() })
	return bctx
}

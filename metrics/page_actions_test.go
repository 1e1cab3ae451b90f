package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

const testKey = "0123456789abcdef0123456789abcdef"

// fakeActs carries out the page's actions on a fakeSource: a retry puts
// the job back to queued, as the store does.
type fakeActs struct {
	src *fakeSource
	mu  sync.Mutex
	got []Action
}

func (f *fakeActs) act(_ context.Context, a Action) (string, error) {
	f.mu.Lock()
	f.got = append(f.got, a)
	f.mu.Unlock()
	if a.Op != "retry" {
		return "", fmt.Errorf("job %d: %s is not faked", a.Job, a.Op)
	}
	f.src.mu.Lock()
	defer f.src.mu.Unlock()
	for i, j := range f.src.jobs {
		if j.ID == a.Job {
			j.Stage, j.FailReason, j.UpdatedAt = state.Queued, "", time.Now().UTC()
			f.src.jobs = append(append([]Job{j}, f.src.jobs[:i]...), f.src.jobs[i+1:]...)
			return fmt.Sprintf("job %d queued again", a.Job), nil
		}
	}
	return "", fmt.Errorf("no job %d", a.Job)
}

func (f *fakeActs) actions() []Action {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Action(nil), f.got...)
}

// actionServer runs a server with actions over studioSource.
func actionServer(t *testing.T) (*Server, *fakeActs) {
	t.Helper()
	acts := &fakeActs{src: studioSource(time.Now().UTC())}
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: acts.src,
		Act: acts.act, ActionKey: testKey, ActionKeyFile: "/var/lib/splatd/status-key"})
	runServer(t, s)
	return s, acts
}

// clickRetry loads the page, keeps key (none when "") in the browser and
// clicks the failed job 129's retry button; it returns the flash line.
func clickRetry(t *testing.T, ctx context.Context, base, key string) string {
	t.Helper()
	con := watchConsole(ctx)
	retry := chromedp.CSS(`#failures tr[data-job="129"] button[data-op="retry"]`)
	if err := chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(retry)); err != nil {
		t.Fatalf("loading the page: %v\nbrowser console:\n%s", err, con)
	}
	if key != "" {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#keybar summary`)), chromedp.SendKeys(chromedp.CSS(`#key`), key), chromedp.Click(chromedp.CSS(`#key-save`))); err != nil {
			t.Fatalf("typing the key: %v", err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click(retry)); err != nil {
		t.Fatalf("clicking retry: %v", err)
	}
	flash, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const f = document.getElementById("flash"); return f.className !== "muted" && f.textContent; })()`))
	if err != nil {
		t.Fatalf("waiting for the action's answer: %v\nbrowser console:\n%s", err, con)
	}
	return flash
}

// testPageRetry: retry a failed job from the page; the action reaches the
// daemon once, says where it came from, and the job shows as queued.
func testPageRetry(t *testing.T, ctx context.Context) {
	s, acts := actionServer(t)
	flash := clickRetry(t, ctx, "http://"+s.Addr()+"/", testKey)
	if flash != "job 129 queued again" {
		t.Errorf("flash = %q, want the daemon's answer", flash)
	}
	got := acts.actions()
	if len(got) != 1 || got[0].Op != "retry" || got[0].Job != 129 || !strings.HasPrefix(got[0].From, "status page (127.0.0.1:") {
		t.Fatalf("actions carried out = %+v, want one retry of job 129 from the status page", got)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#active tr[data-job="129"][data-stage="queued"]`))); err != nil {
		t.Errorf("the retried job does not show as queued: %v", err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#failures tr[data-job="129"]').length`)); err != nil || n != 0 {
		t.Errorf("the retried job is still among the failures (%d, %v)", n, err)
	}
}

// testPageActionWithoutKey: a click with no key kept is refused, says why,
// and nothing is done.
func testPageActionWithoutKey(t *testing.T, ctx context.Context) {
	s, acts := actionServer(t)
	flash := clickRetry(t, ctx, "http://"+s.Addr()+"/", "")
	if !strings.Contains(flash, "refused: no key") || !strings.Contains(flash, "/var/lib/splatd/status-key") {
		t.Errorf("flash = %q, want a refusal naming the key file", flash)
	}
	if got := acts.actions(); len(got) != 0 {
		t.Errorf("a request without key was carried out: %+v", got)
	}
}

// testPageActionForeignOrigin: a page of another origin posts a retry to
// the daemon, as a form (no preflight) and as a fetch holding the key; the
// first is refused for its Origin, the second never leaves the browser.
func testPageActionForeignOrigin(t *testing.T, ctx context.Context) {
	s, acts := actionServer(t)
	target := "http://" + s.Addr() + "/api/jobs/129/retry"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><body><form id="f" method="post" action="%s"></form><p id="fetch"></p><script>
fetch(%q, {method: "POST", headers: {"X-API-Key": %q}}).then((r) => { document.getElementById("fetch").textContent = "sent " + r.status; },
  (e) => { document.getElementById("fetch").textContent = "blocked"; });
</script></body>`, target, target, testKey)
	}))
	t.Cleanup(evil.Close)
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS(`#fetch`))); err != nil {
		t.Fatalf("loading the other page: %v", err)
	}
	fetched, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("fetch").textContent`))
	if err != nil || fetched != "blocked" {
		t.Errorf("the other page's fetch: %q (%v), want blocked by the browser", fetched, err)
	}
	if err := chromedp.Do(ctx, chromedp.Submit(chromedp.CSS(`#f`)), chromedp.WaitReady(chromedp.CSS(`body`))); err != nil {
		t.Fatalf("posting the form: %v", err)
	}
	body, err := chromedp.Run(ctx, chromedp.Poll[string](`location.href.endsWith("/retry") && document.body.textContent`))
	if err != nil || !strings.Contains(body, "refused: the request comes from another page") {
		t.Errorf("the form's answer = %q (%v), want refused for its Origin", body, err)
	}
	if got := acts.actions(); len(got) != 0 {
		t.Errorf("a request from another origin was carried out: %+v", got)
	}
}

// testPageEventsFilter: the history's folder filter hides the other
// folders' events and still holds after a refresh.
func testPageEventsFilter(t *testing.T, ctx context.Context) {
	src := studioSource(time.Now().UTC())
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	con := watchConsole(ctx)
	changed := func(id string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("`+id+`").dispatchEvent(new Event("change", {bubbles: true}))`)); err != nil {
			t.Fatalf("change of #%s: %v", id, err)
		}
	}
	shown := `[...document.querySelectorAll("#events tbody tr")].filter((tr) => !tr.hidden).map((tr) => tr.dataset.folder + " " + tr.dataset.stage).join(",")`
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible(chromedp.CSS(`#ev-folder`)),
		chromedp.SetValue(chromedp.CSS(`#ev-folder`), "/mnt/nas/client-a")); err != nil {
		t.Fatalf("filtering: %v\nbrowser console:\n%s", err, con)
	}
	changed("ev-folder")
	want := "/mnt/nas/client-a signed,/mnt/nas/client-a signed,/mnt/nas/client-a done"
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](shown)); err != nil || got != want {
		t.Errorf("filtered by folder: %q (%v), want %q", got, err, want)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.body.dataset.refreshed === "1"`)); err != nil {
		t.Fatalf("waiting for a refresh: %v\nbrowser console:\n%s", err, con)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](shown)); err != nil || got != want {
		t.Errorf("after a refresh: %q (%v), want %q", got, err, want)
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#ev-stage`), "done")); err != nil {
		t.Fatal(err)
	}
	changed("ev-stage")
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](shown)); err != nil || got != "/mnt/nas/client-a done" {
		t.Errorf("filtered by folder and stage: %q (%v)", got, err)
	}
}

// TestActionGuard: an action needs the key, the CSRF token, the page's own
// Origin and a loopback address (unless remote actions are allowed); each
// refusal says which, and nothing refused reaches Act.
func TestActionGuard(t *testing.T) {
	t.Parallel()
	var calls []Action
	act := func(_ context.Context, a Action) (string, error) { calls = append(calls, a); return "done", nil }
	for _, tc := range []struct {
		name   string
		remote bool // RemoteActions
		addr   string
		header map[string]string
		code   int
		want   string
	}{
		{"all good", false, "127.0.0.1:5000", nil, http.StatusOK, `"message":"done"`},
		{"no key", false, "127.0.0.1:5000", map[string]string{"X-API-Key": ""}, http.StatusForbidden, "refused: no key"},
		{"wrong key", false, "127.0.0.1:5000", map[string]string{"X-API-Key": "nope-nope-nope-nope"}, http.StatusForbidden, "refused: no key"},
		{"no csrf", false, "127.0.0.1:5000", map[string]string{"X-CSRF-Token": ""}, http.StatusForbidden, "CSRF"},
		{"other origin", false, "127.0.0.1:5000", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden, "another page"},
		{"no origin", false, "127.0.0.1:5000", map[string]string{"Origin": ""}, http.StatusForbidden, "another page"},
		{"cross site", false, "127.0.0.1:5000", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "another site"},
		{"remote address", false, "192.0.2.7:5000", nil, http.StatusForbidden, "status.remote_actions"},
		{"remote allowed", true, "192.0.2.7:5000", nil, http.StatusOK, `"message":"done"`},
	} {
		calls = nil
		s := NewServer(ServerOptions{Registry: mustRegistry(), Logger: zerolog.Nop(), Status: sampleSource(), Act: act,
			ActionKey: testKey, ActionKeyFile: "/var/lib/splatd/status-key", RemoteActions: tc.remote})
		s.loopback.Store(true)
		req := httptest.NewRequest(http.MethodPost, "/api/jobs/2/retry", nil)
		req.Host, req.RemoteAddr = "127.0.0.1:9464", tc.addr
		req.Header.Set("Origin", "http://127.0.0.1:9464")
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("X-CSRF-Token", s.csrf)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.srv.Handler.ServeHTTP(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, rec.Code, rec.Body, tc.code, tc.want)
		}
		if ok := tc.code == http.StatusOK; ok != (len(calls) == 1) {
			t.Errorf("%s: Act called %d times", tc.name, len(calls))
		}
		if len(calls) == 1 && (calls[0].Op != "retry" || calls[0].Job != 2 || calls[0].From != "status page ("+tc.addr+")") {
			t.Errorf("%s: action = %+v", tc.name, calls[0])
		}
	}
}

func mustRegistry() *prometheus.Registry {
	reg, _ := NewRegistry("test", testRoutes)
	return reg
}

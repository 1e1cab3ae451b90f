package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// The status page is tested in a real headless Chromium (Debian's package
// `chromium`), driven over the DevTools protocol by chromedp: the page's
// script, its CSP and its escaping only mean something in a browser.
// Without chromium the test skips, unless SPLATD_REQUIRE_BROWSER=1 (set by
// .ci/run, which installs it) makes that a failure.

// browser starts a headless Chromium for the test and returns its context;
// chromedp.NewContext on it opens a tab.
func browser(t *testing.T) context.Context {
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
			t.Fatal("chromium is not installed and SPLATD_REQUIRE_BROWSER=1: apt-get install -y --no-install-recommends chromium")
		}
		t.Skip("chromium is not installed (apt-get install -y --no-install-recommends chromium); set SPLATD_REQUIRE_BROWSER=1 to make this a failure")
	}

	// Generous: a cold Chromium start on a busy 2-core machine takes
	// seconds; every wait below ends on an event well before this.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser to exit, before TempDir's removal
		cancel()
	})
	// Start it now, so that a browser that cannot start fails here and
	// the tabs below share it.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx
}

// tab opens a new tab of the browser for one subtest.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	return ctx
}

// console collects the page's console messages and exceptions, to show
// with a failure and to catch CSP violations.
type console struct {
	mu   sync.Mutex
	msgs []string
}

func watchConsole(ctx context.Context) *console {
	c := &console{}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m.String())
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.msgs, "\n")
}

func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	b := browser(t)
	// One browser, one tab per subtest: a Chromium start costs seconds
	// on a loaded machine. The subtests run one after the other.
	t.Run("jobs", func(t *testing.T) { testPageJobs(t, tab(t, b)) })
	t.Run("10000 jobs", func(t *testing.T) { testPageManyJobs(t, tab(t, b)) })
	t.Run("without script", func(t *testing.T) { testPageWithoutScript(t, tab(t, b)) })
	t.Run("screenshot", func(t *testing.T) { testPageScreenshot(t, tab(t, b)) })
	t.Run("not ready", func(t *testing.T) { testPageNotReady(t, tab(t, b)) })
	t.Run("events filter", func(t *testing.T) { testPageEventsFilter(t, tab(t, b)) })
	t.Run("retry from the page", func(t *testing.T) { testPageRetry(t, tab(t, b)) })
	t.Run("action without key", func(t *testing.T) { testPageActionWithoutKey(t, tab(t, b)) })
	t.Run("action from another origin", func(t *testing.T) { testPageActionForeignOrigin(t, tab(t, b)) })
}

// testPageJobs loads the page over a source holding a job in progress, a
// published job and a failed one, and checks what a person sees.
func testPageJobs(t *testing.T, ctx context.Context) {

	now := time.Now().UTC()
	src := &fakeSource{
		status: Status{
			Version: "v9.9.9-test", Protocol: "legacy",
			Watched: []Folder{{Path: "/srv/captures", Recursive: true}},
			Token:   Token{State: TokenOK},
			Queue:   map[state.Stage]int{state.Signed: 1, state.Done: 1, state.Failed: 1},
			Time:    now,
		},
		jobs: []Job{
			{ID: 3, Path: "/srv/captures/big.ply", Stage: state.Signed, Progress: &Progress{Sent: 30 << 20, Size: 120 << 20, Rate: 3 << 20, ETA: 30}, UpdatedAt: now},
			{ID: 2, Path: "/srv/captures/<b>broken</b>.ply", Stage: state.Failed, Attempts: 1,
				FailReason: `invalid file: PLY header ends early <img src=x onerror="document.title='pwned'">`,
				LastError:  "storage PUT https://st.example/k?X-Amz-Signature=deadbeefdeadbeef: 403", UpdatedAt: now.Add(-time.Minute)},
			{ID: 1, Path: "/srv/captures/room.ply", Stage: state.Done, ViewerURL: "https://viewer.example/view?id=h1abc&X-Amz-Signature=deadbeefdeadbeef", UpdatedAt: now.Add(-2 * time.Minute)},
		},
	}
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	base := "http://" + s.Addr() + "/"

	con := watchConsole(ctx)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nbrowser console:\n%s", append(args, con)...)
	}

	published := chromedp.CSS(`#published tr[data-job="1"] td.viewer a`)
	reason := chromedp.CSS(`#failures tr[data-job="2"] td.reason`)
	start := time.Now()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(published),
		chromedp.WaitVisible(reason),
	); err != nil {
		fail("loading the page: %v", err)
	}
	t.Logf("page loaded and rendered in %v", time.Since(start))

	href, err := chromedp.Run(ctx, chromedp.AttributeValue(published, "href"))
	if err != nil {
		fail("viewer link: %v", err)
	}
	if href.Value != "https://viewer.example/view?id=h1abc" {
		t.Errorf("viewer link href = %q, want https://viewer.example/view?id=h1abc", href.Value)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(reason))
	if err != nil {
		fail("failure reason: %v", err)
	}
	if want := `invalid file: PLY header ends early <img src=x onerror="document.title='pwned'">`; text != want {
		t.Errorf("failure reason shows %q, want the text as is: %q", text, want)
	}

	// User data is text, never markup: no element came out of the path or
	// the reason, and the onerror handler never ran.
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#failures b, #failures img").length`))
	if err != nil {
		fail("counting injected elements: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		fail("title: %v", err)
	}
	if injected != 0 || title == "pwned" {
		t.Errorf("page turned user data into markup: %d elements, title %q", injected, title)
	}
	path, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#failures tr[data-job="2"] td.path`)))
	if err != nil || path != "/srv/captures/<b>broken</b>.ply" {
		t.Errorf("failed job path shows %q (%v)", path, err)
	}

	// The upload in progress has its bar; the queue shows its counts.
	value, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#active tr[data-job="3"] progress`), "value"))
	if err != nil || value.Value != fmt.Sprint(30<<20) {
		t.Errorf("progress value = %+v (%v), want %d", value, err, 30<<20)
	}
	count, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#stages [data-stage="failed"] b`)))
	if err != nil || count != "1" {
		t.Errorf("stages: failed count = %q (%v), want 1", count, err)
	}

	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		fail("reading the document: %v", err)
	}
	if strings.Contains(html, "deadbeef") {
		t.Errorf("the rendered page holds a signature:\n%s", html)
	}
	for _, link := range []string{"metrics", "healthz", "readyz"} {
		if !strings.Contains(html, `href="`+link+`"`) {
			t.Errorf("page lacks its link to /%s", link)
		}
	}

	// The page refreshes itself: a job that fails after it loaded shows up
	// without a reload.
	src.addJob(Job{ID: 4, Path: "/srv/captures/late.ply", Stage: state.Failed, FailReason: "HTTP 400: bad settings", UpdatedAt: time.Now().UTC()})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#failures tr[data-job="4"]`))); err != nil {
		fail("waiting for the refresh to show a new failure: %v", err)
	}

	if c := con.String(); strings.Contains(c, "Content Security Policy") {
		t.Errorf("the page breaks its own CSP:\n%s", c)
	}
}

// testPageManyJobs loads the page with 10,000 jobs in the source and logs
// how long it takes to render: the figure issue 14 asks for.
func testPageManyJobs(t *testing.T, ctx context.Context) {
	src := manyJobs(10_000)
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	con := watchConsole(ctx)

	start := time.Now()
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+s.Addr()+"/"),
		chromedp.WaitReady(chromedp.CSS(`body[data-loaded="true"]`)),
	); err != nil {
		t.Fatalf("loading the page: %v\nbrowser console:\n%s", err, con)
	}
	t.Logf("status page with %d jobs in the state: loaded and rendered in %v", len(src.jobs), time.Since(start))

	// The page asks for bounded lists and says how many there are.
	more, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#published-more`)))
	if err != nil || !strings.Contains(more, "showing 10 of") {
		t.Errorf("published-more = %q (%v)", more, err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr[data-job]").length`))
	if err != nil || rows > 120 {
		t.Errorf("page rendered %d job rows (%v), want the bounded lists only", rows, err)
	}
}

// testPageNotReady: readiness says not ready with the reasons /readyz
// gives, first on the page, and the token's advice beside it.
func testPageNotReady(t *testing.T, ctx context.Context) {
	src := sampleSource()
	src.status.Token = Token{State: TokenRefused, Advice: "write a valid token to /etc/splatd/token"}
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src,
		Ready: func() error {
			return errors.Join(errors.New("the API is unreachable: dial tcp 127.0.0.1:1: connection refused"))
		}})
	runServer(t, s)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible(chromedp.CSS(`#readiness.bad`))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#readiness`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not ready", "the API is unreachable: dial tcp 127.0.0.1:1: connection refused", "refused", "write a valid token to /etc/splatd/token"} {
		if !strings.Contains(text, want) {
			t.Errorf("readiness reads %q, want %q in it", text, want)
		}
	}
	top, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.getElementById("readiness").getBoundingClientRect().top`))
	if err != nil || top > 120 {
		t.Errorf("readiness starts at y = %v (%v), want it at the top", top, err)
	}
}

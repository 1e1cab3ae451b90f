package metrics

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// studioSource is a daemon in the middle of a working day, for the page's
// screenshot: two uploads under a bandwidth limit, published scenes, a
// failure, two rate-limit classes.
func studioSource(now time.Time) *fakeSource {
	return &fakeSource{
		status: Status{
			Version: "v1.4.0", Protocol: "v1",
			Watched: []Folder{{Path: "/srv/captures/inbox", Recursive: true}, {Path: "/mnt/nas/client-a", Recursive: true, Polling: true}},
			Token:   Token{State: TokenOK},
			Pacing: []Pacing{
				{Class: "normal", Limit: 120, Remaining: 97, Reset: now.Add(41 * time.Second)},
				{Class: "strict", Limit: 10, Remaining: 8, Reset: now.Add(41 * time.Second)},
			},
			Bandwidth: Bandwidth{Limit: 20 << 20, Rate: 19.6 * (1 << 20), InFlight: 1400 << 20},
			Queue:     map[state.Stage]int{state.Queued: 3, state.Signed: 2, state.Done: 128, state.Failed: 1},
			Time:      now,
		},
		jobs: []Job{
			{ID: 131, Path: "/srv/captures/inbox/hangar-east.ply", Stage: state.Signed, Progress: &Progress{Sent: 610 << 20, Size: 1520 << 20}, UpdatedAt: now.Add(-3 * time.Second)},
			{ID: 130, Path: "/mnt/nas/client-a/lobby-north.ply", Stage: state.Signed, Attempts: 1, Progress: &Progress{Sent: 300 << 20, Size: 790 << 20}, UpdatedAt: now.Add(-4 * time.Second)},
			{ID: 129, Path: "/srv/captures/inbox/notes.ply", Stage: state.Failed, Attempts: 1, FailReason: "invalid file: not a PLY or SOG file (starts with \"this is \")", UpdatedAt: now.Add(-9 * time.Minute)},
			{ID: 128, Path: "/srv/captures/inbox/statue.compressed.ply", Stage: state.Done, ViewerURL: "https://superspl.at/view?id=o7f5chaz", UpdatedAt: now.Add(-12 * time.Minute)},
			{ID: 127, Path: "/mnt/nas/client-a/garden.sog", Stage: state.Done, ViewerURL: "https://superspl.at/view?id=oq82ql2v", UpdatedAt: now.Add(-40 * time.Minute)},
			{ID: 126, Path: "/srv/captures/inbox/courtyard.ply", Stage: state.Done, ViewerURL: "https://superspl.at/view?id=a4x7j8bm", UpdatedAt: now.Add(-2 * time.Hour)},
		},
	}
}

// testPageWithoutScript loads the page with script execution off: what a
// person sees is the daemon's own render, data and all.
func testPageWithoutScript(t *testing.T, ctx context.Context) {
	src := sampleSource()
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("turning script off: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitReady(chromedp.CSS(`body`))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	for sel, want := range map[string]string{
		`#bandwidth`: "11.9 MiB/s now, limit 50.0 MiB/s",
		`#published tr[data-job="1"] td.viewer a`: "https://viewer.example/view?id=h1",
		`#failures tr[data-job="2"] td.reason`:    "invalid PLY header",
		`#queue tr[data-stage="done"] td.num`:     "7",
		`#conn`:                                   "refreshes every 5 s",
	} {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
		if err != nil || !strings.Contains(text, want) {
			t.Errorf("without script, %s shows %q (%v); want %q", sel, text, err, want)
		}
	}
}

// testPageScreenshot takes the README's screenshot of the page as it first
// arrives (before the script's first refresh, five seconds later), and
// checks that it shows data: the daemon rendered it. With
// SPLATD_SCREENSHOT_OUT set, the PNG is written there too:
//
//	SPLATD_SCREENSHOT_OUT=$PWD/docs/status-page.png go test ./metrics -run 'TestStatusPageInBrowser/screenshot'
func testPageScreenshot(t *testing.T, ctx context.Context) {
	src := studioSource(time.Now().UTC())
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1100, 800),
		chromedp.Navigate("http://localhost:"+portOf(s.Addr())+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#active tr[data-job="131"] progress`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`body`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"limit 20.0 MiB/s", "hangar-east.ply", "https://superspl.at/view?id=o7f5chaz", "as of "} {
		if !strings.Contains(text, want) {
			t.Errorf("the first view lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "loading") {
		t.Errorf("the first view says loading:\n%s", text)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" || len(png) > 200<<10 {
		t.Errorf("screenshot: %d bytes; want a PNG under 200 KiB", len(png))
	}
	out := filepath.Join(t.TempDir(), "status-page.png")
	if o := os.Getenv("SPLATD_SCREENSHOT_OUT"); o != "" {
		out = o
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the first view: %s (%d bytes)", out, len(png))
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

// testPageServerMatchesScript: the daemon's first render and the script's
// refresh build the same markup (time cells aside: they move on), so the
// page does not change its look five seconds after it loads.
func testPageServerMatchesScript(t *testing.T, ctx context.Context) {
	src := studioSource(time.Now().UTC())
	src.jobs = append(src.jobs, manyJobs(60).jobs...) // "showing 50 of …" lines
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src})
	runServer(t, s)
	con := watchConsole(ctx)
	const parts = `["version", "ready", "protocol", "token", "bandwidth", "reasons", "queue", "active", "active-more",
		"published", "published-more", "failures", "failures-more", "pacing", "watched"].map((id) => document.getElementById(id).outerHTML)`
	timeCell := regexp.MustCompile(`<td class="time"[^>]*>[^<]*</td>`)
	read := func() []string {
		t.Helper()
		html, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](parts))
		if err != nil {
			t.Fatalf("reading the page: %v\nbrowser console:\n%s", err, con)
		}
		for i := range html {
			html[i] = timeCell.ReplaceAllString(html[i], `<td class="time">…</td>`)
		}
		return html
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitReady(chromedp.CSS(`body[data-loaded="true"]`))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	server := read()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("conn").textContent.startsWith("updated")`)); err != nil {
		t.Fatalf("waiting for the script's refresh: %v\nbrowser console:\n%s", err, con)
	}
	script := read()
	for i := range server {
		if server[i] != script[i] {
			t.Errorf("the daemon rendered\n%s\nthe script rendered\n%s", server[i], script[i])
		}
	}
}

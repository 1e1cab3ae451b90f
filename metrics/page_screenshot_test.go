package metrics

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// studioSource is a daemon in the middle of a working day, for the page's
// screenshot: two uploads under a bandwidth limit, a file still being
// copied in, a job waiting for its next try, published scenes, a failure,
// two folders, an hour of uploads and its events.
func studioSource(now time.Time) *fakeSource {
	inbox, nas := "/srv/captures/inbox", "/mnt/nas/client-a"
	up1 := &Progress{Sent: 610 << 20, Size: 1520 << 20, Rate: 9.8 * (1 << 20), ETA: 93}
	up2 := &Progress{Sent: 300 << 20, Size: 790 << 20, Rate: 9.8 * (1 << 20), ETA: 50}
	minutes := make([]int64, 60)
	for i := range minutes {
		minutes[i] = int64((i*37)%11+(i/6)*3) << 26
	}
	ev := func(ago time.Duration, job uint64, folder, name string, st state.Stage, text string) Event {
		return Event{Time: now.Add(-ago), Job: job, Folder: folder, Path: folder + "/" + name, Stage: st, Text: text}
	}
	return &fakeSource{
		status: Status{
			Version: "v1.4.0", Protocol: "v1",
			Watched: []Folder{
				{Path: inbox, Recursive: true, LastScan: now.Add(-3 * time.Minute), Jobs: FolderJobs{Waiting: 2, Active: 1, Done: 96, Failed: 1}},
				{Path: nas, Recursive: true, Polling: true, LastScan: now.Add(-40 * time.Second), Jobs: FolderJobs{Waiting: 1, Active: 2, Done: 32}},
			},
			Token: Token{State: TokenOK},
			Ready: Readiness{Ready: true},
			Pacing: []Pacing{
				{Class: "normal", Limit: 120, Remaining: 97, Reset: now.Add(41 * time.Second)},
				{Class: "strict", Limit: 10, Remaining: 8, Reset: now.Add(41 * time.Second)},
			},
			Bandwidth:  Bandwidth{Limit: 20 << 20, Rate: 19.6 * (1 << 20), InFlight: 1400 << 20},
			Queue:      map[state.Stage]int{state.Queued: 3, state.Signed: 3, state.Done: 128, state.Failed: 1},
			Backlog:    Backlog{Files: 6, Bytes: 5300 << 20},
			Today:      Today{Sent: 41 << 30, Since: now.Add(-9 * time.Hour), Published: 23, PublishedBytes: 38 << 30},
			Settling:   []Settling{{Path: inbox + "/warehouse-b.ply", Folder: inbox, Size: 1229 << 20, Since: now.Add(-4 * time.Second), Changed: now}},
			Throughput: minutes,
			Events: []Event{
				ev(3*time.Second, 131, inbox, "hangar-east.ply", state.Signed, "ready → signed"),
				ev(4*time.Second, 130, nas, "lobby-north.ply", state.Signed, "ready → signed"),
				ev(50*time.Second, 132, nas, "stairwell.ply", state.Signed, "ready → signed"),
				ev(8*time.Minute, 125, inbox, "old-scan.ply", state.Canceled, "cancel by an operator, via status page (127.0.0.1:51234)"),
				ev(9*time.Minute, 129, inbox, "notes.ply", state.Failed, "queued → failed: invalid file: not a PLY or SOG file"),
				ev(12*time.Minute, 128, inbox, "statue.compressed.ply", state.Done, "processing → done: splat o7f5chaz"),
				ev(40*time.Minute, 127, nas, "garden.sog", state.Done, "processing → done: splat oq82ql2v"),
			},
			Time: now,
		},
		jobs: []Job{
			{ID: 132, Path: nas + "/stairwell.ply", Size: 640 << 20, Stage: state.Signed, Attempts: 2, NextTry: now.Add(14 * time.Second),
				Activity: Activity(state.Signed, Doing{NextTry: now.Add(14 * time.Second)}, now), LastError: "storage PUT part 4: HTTP 503 Service Unavailable", UpdatedAt: now.Add(-2 * time.Second)},
			{ID: 133, Path: inbox + "/atrium.ply", Stage: state.Queued, Attempts: 1, NextTry: now.Add(8 * time.Second),
				Activity: Activity(state.Queued, Doing{NextTry: now.Add(8 * time.Second)}, now), LastError: "incomplete: the PLY body is shorter than its header says", UpdatedAt: now.Add(-time.Second)},
			{ID: 131, Path: inbox + "/hangar-east.ply", Size: 1520 << 20, Stage: state.Signed, Progress: up1, Activity: Activity(state.Signed, Doing{Upload: up1}, now), UpdatedAt: now.Add(-3 * time.Second)},
			{ID: 130, Path: nas + "/lobby-north.ply", Size: 790 << 20, Stage: state.Signed, Attempts: 1, Progress: up2, Activity: Activity(state.Signed, Doing{Upload: up2}, now), UpdatedAt: now.Add(-4 * time.Second)},
			{ID: 129, Path: inbox + "/notes.ply", Size: 2 << 10, Stage: state.Failed, Attempts: 1, FailReason: "invalid file: not a PLY or SOG file (starts with \"this is \")", UpdatedAt: now.Add(-9 * time.Minute)},
			{ID: 128, Path: inbox + "/statue.compressed.ply", Size: 212 << 20, Stage: state.Done, ViewerURL: "https://superspl.at/view?id=o7f5chaz", UpdatedAt: now.Add(-12 * time.Minute)},
			{ID: 127, Path: nas + "/garden.sog", Size: 96 << 20, Stage: state.Done, ViewerURL: "https://superspl.at/view?id=oq82ql2v", UpdatedAt: now.Add(-40 * time.Minute)},
			{ID: 126, Path: inbox + "/courtyard.ply", Size: 1100 << 20, Stage: state.Done, ViewerURL: "https://superspl.at/view?id=a4x7j8bm", UpdatedAt: now.Add(-2 * time.Hour)},
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
		`#stages [data-stage="done"] b`:           "7",
		`#conn`:                                   "refreshes every 5 s",
	} {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
		if err != nil || !strings.Contains(text, want) {
			t.Errorf("without script, %s shows %q (%v); want %q", sel, text, err, want)
		}
	}
}

// testPageScreenshot takes the README's screenshots of the page as it
// first arrives (before the script's first refresh): what is above the
// fold at 1100×800, and the whole page. It checks that the first view
// holds readiness, the uploads, the failures, the backlog, today's totals,
// the file being written and the folders. With SPLATD_SCREENSHOT_OUT set
// (a folder), the PNGs are written there:
//
//	SPLATD_SCREENSHOT_OUT=$PWD/docs go test ./metrics -run 'TestStatusPageInBrowser/screenshot'
func testPageScreenshot(t *testing.T, ctx context.Context) {
	src := studioSource(time.Now().UTC())
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: src,
		Act: func(context.Context, Action) (string, error) { return "", nil }, ActionKey: "k"})
	runServer(t, s)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1100, 800),
		chromedp.Navigate("http://localhost:"+portOf(s.Addr())+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#active tr[data-job="131"] progress`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	// Above the fold: each of these ends above y = 800.
	for _, sel := range []string{"#readiness", "#t-uploading", "#t-failures", "#t-backlog", "#t-today", "#spark svg",
		`#active tr[data-job="131"]`, `#active tr.settling`, `#active tr[data-job="132"]`, `#failures tr[data-job="129"]`, `#folders tr[data-folder="/mnt/nas/client-a"]`} {
		bottom, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector(`+jsString(sel)+`).getBoundingClientRect().bottom`))
		if err != nil || bottom <= 0 || bottom > 800 {
			t.Errorf("%s ends at y = %v (%v): not above the fold", sel, bottom, err)
		}
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ready", "limit 20.0 MiB/s", "hangar-east.ply", "6 files, 5.2 GiB", "41.0 GiB sent", "23 files published (38.0 GiB)",
		"being written, 1.2 GiB so far", "next try in 1", "storage PUT part 4: HTTP 503", "invalid file: not a PLY", "polling",
		"https://superspl.at/view?id=o7f5chaz", "1.5 GiB"} {
		if !strings.Contains(text, want) {
			t.Errorf("the first view lacks %q:\n%s", want, text)
		}
	}
	above, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := t.TempDir()
	if o := os.Getenv("SPLATD_SCREENSHOT_OUT"); o != "" {
		dir = o
	}
	for name, png := range map[string][]byte{"status-page.png": above, "status-page-full.png": full} {
		if len(png) < 8 || string(png[1:4]) != "PNG" || len(png) > 250<<10 {
			t.Errorf("%s: %d bytes; want a PNG under 250 KiB", name, len(png))
		}
		out := filepath.Join(dir, name)
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", out, len(png))
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

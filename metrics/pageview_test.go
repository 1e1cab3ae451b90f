package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// TestPageRendersFirstState: the page at / arrives with its data in the
// markup (no script needed to see it): the queue, the jobs with progress,
// viewer link and reason, the bandwidth limit and rate, the pacing and the
// folders; user data escaped, no signature, and no "loading…".
func TestPageRendersFirstState(t *testing.T) {
	t.Parallel()
	src := sampleSource()
	src.status.Bandwidth.InFlight = 30 << 20
	src.jobs = append(src.jobs, Job{ID: 4, Path: "/srv/captures/<b>x</b>.ply", Stage: state.Failed,
		FailReason: `bad <img src=x onerror="alert(1)">`, LastError: "PUT https://st.example/k?X-Amz-Signature=deadbeef: 403", UpdatedAt: t0})
	src.jobs[2].ViewerURL = "https://viewer.example/view?id=h1&X-Amz-Signature=deadbeef"
	h := statusHandler(t, ServerOptions{Status: src}, true)
	r := do(t, h, "/")
	if r.code != http.StatusOK {
		t.Fatalf("/ = %d %s", r.code, r.body)
	}
	for _, want := range []string{
		`<body data-loaded="true">`,
		`<small id="version">v1.2.3</small> <small id="protocol">v1</small>`,
		`<span id="bandwidth">11.9 MiB/s now, limit 50.0 MiB/s, 30.0 MiB to send</span>`,
		`<span data-stage="queued">queued <b>3</b></span> · <span data-stage="done">done <b>7</b></span>`,
		`<tr data-job="3" data-stage="signed"><td class="num">3</td><td class="path">/srv/captures/c.ply</td><td class="num size">40 B</td><td class="stage">signed</td>`,
		`<td class="activity"><progress max="40" value="10" aria-label="upload of job 3"></progress>uploading 10 B of 40 B (25 %)</td>`,
		`<td class="viewer"><a href="https://viewer.example/view?id=h1" target="_blank" rel="noopener noreferrer">https://viewer.example/view?id=h1</a></td>`,
		`<td class="reason">invalid PLY header</td>`,
		`<td class="path">/srv/captures/&lt;b&gt;x&lt;/b&gt;.ply</td>`,
		`<td class="reason">bad &lt;img src=x onerror=&#34;alert(1)&#34;&gt;</td>`,
		`<tr data-class="publish"><td>publish</td><td class="num">60</td><td class="num">12</td>`,
		`<tr data-folder="/srv/captures"><td class="path">/srv/captures <span class="muted">(recursive)</span></td><td class="ok">watching</td>`,
		`<span id="token" class="ok">ok</span>`,
		`<b>2 files, 1.5 GiB</b>`,
		`<b>3.0 GiB sent</b><span>4 files published (2.0 GiB)</span>`,
		`<tr class="settling" data-file="/srv/captures/incoming.ply"><td class="num">—</td><td class="path">/srv/captures/incoming.ply</td><td class="num size">1.2 GiB</td><td class="stage">seen</td><td class="activity">being written, 1.2 GiB so far</td>`,
		`<tr data-folder="/srv/captures" data-stage="failed"><td class="time" title="2025-11-23T17:59:00Z">`,
		`<td class="num">2</td><td>failed</td><td class="path">/srv/captures/b.ply</td><td>failed: invalid PLY header</td></tr>`,
		`<option value="/srv/captures">/srv/captures</option>`,
		`<option value="done">done</option><option value="failed">failed</option>`,
		`<polyline points="0.0,39.0 `,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, bad := range []string{"loading…", "deadbeef", "<b>x</b>", "<img"} {
		if strings.Contains(r.body, bad) {
			t.Errorf("page holds %q", bad)
		}
	}
}

// TestPageRenderWithFailingSource: a source that fails still gives a page,
// which says why and leaves the first refresh to the script.
func TestPageRenderWithFailingSource(t *testing.T) {
	t.Parallel()
	src := sampleSource()
	src.err = errors.New("store closed; see https://st.example/x?X-Amz-Signature=deadbeef")
	r := do(t, statusHandler(t, ServerOptions{Status: src}, true), "/")
	if r.code != http.StatusOK || !strings.Contains(r.body, `class="bad" role="status">cannot read the status: store closed`) ||
		strings.Contains(r.body, "data-loaded") || strings.Contains(r.body, "deadbeef") {
		t.Errorf("/ over a failing source = %d:\n%s", r.code, r.body)
	}
}

// TestPageViewFormats: the server's numbers and times read as the
// script's do.
func TestPageViewFormats(t *testing.T) {
	t.Parallel()
	for n, want := range map[float64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 2 << 20: "2.0 MiB", 3.5 * (1 << 30): "3.5 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%v) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[int]string{-5: "in 5 s", 12: "12 s ago", 600: "10 min ago", 7200: "2 h ago"} {
		if got := timeCell(t0.Add(-secs(d)), t0).Text; got != want {
			t.Errorf("timeCell(%d s ago) = %q, want %q", d, got, want)
		}
	}
	if got := bandwidthText(Bandwidth{}); got != "0 B/s now, limit none" {
		t.Errorf("bandwidthText(none) = %q", got)
	}
	for _, tc := range []struct {
		p    Progress
		want string
	}{
		{Progress{}, ""},
		{Progress{Rate: 2 << 20}, ", 2.0 MiB/s"},
		{Progress{Rate: 2 << 20, ETA: 42.4}, ", 2.0 MiB/s, ETA 42 s"},
		{Progress{Rate: 1024, ETA: 600}, ", 1.0 KiB/s, ETA 10 min"},
		{Progress{Rate: 1024, ETA: 7200}, ", 1.0 KiB/s, ETA 2 h"},
	} {
		if got := rateETA(tc.p); got != tc.want {
			t.Errorf("rateETA(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

// TestPageCheckProgress: a queued job whose file is being hashed shows its
// check's bar, named by its step; an upload its own.
func TestPageCheckProgress(t *testing.T) {
	t.Parallel()
	list := JobList{Total: 2, Jobs: []Job{
		{ID: 4, Path: "/srv/captures/huge.ply", Stage: state.Queued, UpdatedAt: t0,
			Check: &Progress{Step: "hashing", Sent: 2150 << 20, Size: 5 << 30, Rate: 180 << 20, ETA: 16}},
		{ID: 3, Path: "/srv/captures/big.ply", Stage: state.Signed, UpdatedAt: t0,
			Progress: &Progress{Sent: 30 << 20, Size: 120 << 20, Rate: 3 << 20, ETA: 30}},
	}}
	rows := pageJobRows(pageActive, list, t0, true)
	if p := rows.Jobs[0].Progress; p == nil || p.Label != "hashing of job 4" || p.Sent != 2150<<20 {
		t.Errorf("hashing job's progress = %+v", p)
	}
	if p := rows.Jobs[1].Progress; p == nil || p.Label != "upload of job 3" {
		t.Errorf("uploading job's progress = %+v", p)
	}
	if a := rows.Jobs[1].Actions; len(a) != 1 || a[0] != "cancel" {
		t.Errorf("a signed job's actions = %v, want cancel", a)
	}
}

// TestActivity: the one wording of what a job does, as `splatd jobs`,
// /api/jobs and the page show it.
func TestActivity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stage state.Stage
		d     Doing
		want  string
	}{
		{state.Signed, Doing{Upload: &Progress{Sent: 30 << 20, Size: 120 << 20, Rate: 3 << 20, ETA: 30}}, "uploading 30.0 MiB of 120.0 MiB (25 %), 3.0 MiB/s, ETA 30 s"},
		{state.Queued, Doing{Check: &Progress{Step: "hashing", Sent: 2150 << 20, Size: 5 << 30, Rate: 180 << 20, ETA: 16}}, "hashing 2.1 GiB of 5.0 GiB (41 %), 180.0 MiB/s, ETA 16 s"},
		{state.Signed, Doing{NextTry: t0.Add(12 * time.Second)}, "next try in 12 s"},
		{state.Signed, Doing{NextTry: t0.Add(-time.Second)}, ""},
		{state.Signed, Doing{NextTry: t0.Add(10 * time.Minute), Parked: "job 3's session is another daemon's"}, "parked: job 3's session is another daemon's"},
		{state.Ready, Doing{RateLimit: "strict: no request left, until 18:01:00 UTC"}, "rate limit strict: no request left, until 18:01:00 UTC"},
		{state.Ready, Doing{WorkerWait: "a free worker (2 of 2 busy)"}, "waiting for a free worker (2 of 2 busy)"},
		{state.Processing, Doing{NextTry: t0.Add(5 * time.Second)}, "the service processes it; next look in 5 s"},
		{state.Done, Doing{NextTry: t0.Add(time.Minute)}, ""},
		{state.Done, Doing{AfterAction: "move", AfterError: "disk full"}, "after-action move failed (tried again): disk full"},
	} {
		if got := Activity(tc.stage, tc.d, t0); got != tc.want {
			t.Errorf("Activity(%s, %+v) = %q, want %q", tc.stage, tc.d, got, tc.want)
		}
	}
}

// TestPageBacklogStaysBounded: 10,000 queued jobs and 1,000 files being
// copied in take a few rows of "at work", so the failures stay in sight; a
// queued job whose check runs (listed at work by the source) is listed once.
func TestPageBacklogStaysBounded(t *testing.T) {
	t.Parallel()
	src := sampleSource()
	for i := range 10_000 {
		src.jobs = append(src.jobs, Job{ID: uint64(101 + i), Path: fmt.Sprintf("/srv/captures/q%d.ply", i), Stage: state.Queued, UpdatedAt: t0})
	}
	hashing := Job{ID: 100, Path: "/srv/captures/hashing.ply", Stage: state.Queued, Check: &Progress{Step: "hashing", Sent: 1, Size: 2}, UpdatedAt: t0}
	src.jobs = append([]Job{hashing}, src.jobs...)
	for i := range 1000 {
		src.status.Settling = append(src.status.Settling, Settling{Path: fmt.Sprintf("/srv/captures/copy%d.ply", i), Size: 1})
	}
	v := (&Server{opts: ServerOptions{Status: activeAsSource{src}}}).pageView(t.Context(), t0)
	if len(v.Queued.Jobs) != 4 || v.Queued.Total != 10_001 || len(v.Settling) != maxSettlingShown || v.SettlingMore != 991 {
		t.Errorf("queued rows %d of %d, settling rows %d (+%d)", len(v.Queued.Jobs), v.Queued.Total, len(v.Settling), v.SettlingMore)
	}
	for _, j := range v.Queued.Jobs {
		if j.ID == 100 {
			t.Errorf("the hashing job is listed twice")
		}
	}
}

// activeAsSource lists, as the daemon does, the queued jobs whose check
// runs among the active ones.
type activeAsSource struct{ *fakeSource }

func (a activeAsSource) Jobs(ctx context.Context, q JobQuery) (JobList, error) {
	l, err := a.fakeSource.Jobs(ctx, q)
	if slices.Contains(q.Stages, state.Ready) && !slices.Contains(q.Stages, state.Queued) {
		l.Jobs = append(l.Jobs, a.fakeSource.jobs[0])
		l.Total++
	}
	return l, err
}

// TestSparkline: one point a minute across the box, the busiest minute at
// the top, an idle hour a line along the bottom.
func TestSparkline(t *testing.T) {
	t.Parallel()
	minutes := make([]int64, 60)
	minutes[30], minutes[59] = 600<<20, 60<<20
	sp := sparkline(minutes)
	pts := strings.Fields(sp.Points)
	if len(pts) != 60 || pts[0] != "0.0,39.0" || pts[30] != "122.0,1.0" || pts[59] != "240.0,35.2" {
		t.Errorf("points %d: %s … %s … %s", len(pts), pts[0], pts[30], pts[59])
	}
	if sp.Peak != "10.0 MiB/s" || sp.Now != "1.0 MiB/s" {
		t.Errorf("peak %q, now %q", sp.Peak, sp.Now)
	}
	if idle := sparkline(make([]int64, 60)); !strings.HasPrefix(idle.Points, "0.0,39.0 4.1,39.0") || idle.Peak != "0 B/s" {
		t.Errorf("idle hour: %q, peak %q", idle.Points[:30], idle.Peak)
	}
}

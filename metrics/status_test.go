package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// fakeSource is a StatusSource over fixed data. Jobs are kept most recently
// updated first, as the contract asks of the daemon.
type fakeSource struct {
	status Status
	jobs   []Job
	err    error
	// ignoreLimit makes Jobs return every match, as a buggy source would.
	ignoreLimit bool

	mu      sync.Mutex
	queries []JobQuery
}

func (f *fakeSource) Status(context.Context) (Status, error) {
	if f.err != nil {
		return Status{}, f.err
	}
	return f.status, nil
}

func (f *fakeSource) Jobs(_ context.Context, q JobQuery) (JobList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if f.err != nil {
		return JobList{}, f.err
	}
	var out JobList
	for _, j := range f.jobs {
		if len(q.Stages) > 0 && !slices.Contains(q.Stages, j.Stage) {
			continue
		}
		out.Total++
		if len(out.Jobs) < q.Limit || f.ignoreLimit {
			out.Jobs = append(out.Jobs, j)
		}
	}
	return out, nil
}

// addJob puts j first, as the most recently updated job.
func (f *fakeSource) addJob(j Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append([]Job{j}, f.jobs...)
}

func (f *fakeSource) lastQuery() JobQuery {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		return JobQuery{}
	}
	return f.queries[len(f.queries)-1]
}

// statusHandler returns the server's handler as it behaves on a loopback
// listener or not, without binding anything: tests talk to loopback only.
func statusHandler(t testing.TB, o ServerOptions, loopback bool) http.Handler {
	t.Helper()
	if o.Registry == nil {
		o.Registry, _ = NewRegistry("test", testRoutes)
	}
	o.Logger = zerolog.Nop()
	s := NewServer(o)
	s.loopback.Store(loopback)
	return s.srv.Handler
}

type response struct {
	code   int
	header http.Header
	body   string
}

func do(t testing.TB, h http.Handler, target string, header ...string) response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	req.Host = "127.0.0.1:9464" // as a local browser or script sends it
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return response{rec.Code, rec.Result().Header, rec.Body.String()}
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decoding %q: %v", body, err)
	}
	return v
}

var t0 = time.Date(2025, 11, 23, 18, 0, 0, 0, time.UTC)

func sampleSource() *fakeSource {
	return &fakeSource{
		status: Status{
			Version:  "v1.2.3",
			Protocol: "v1",
			Watched:  []Folder{{Path: "/srv/captures", Recursive: true, LastScan: t0.Add(-time.Minute), Jobs: FolderJobs{Waiting: 3, Active: 1, Done: 7, Failed: 1}}},
			Token:    Token{State: TokenOK},
			Pacing:   []Pacing{{Class: "publish", Limit: 60, Remaining: 12, Reset: t0.Add(time.Minute), Waiting: 2, Parked: 3}},
			Bandwidth: Bandwidth{
				Limit: 50 << 20,
				Rate:  12.5e6,
			},
			Queue:      map[state.Stage]int{state.Queued: 3, state.Done: 7},
			Time:       t0,
			Backlog:    Backlog{Files: 2, Bytes: 1536 << 20},
			Today:      Today{Sent: 3 << 30, Since: t0.Add(-time.Hour), Published: 4, PublishedBytes: 2 << 30},
			Settling:   []Settling{{Path: "/srv/captures/incoming.ply", Folder: "/srv/captures", Size: 1229 << 20, Since: t0.Add(-6 * time.Second), Changed: t0.Add(-time.Second)}},
			Throughput: append(make([]int64, 58), 600<<20, 300<<20),
			Events: []Event{
				{Time: t0.Add(-time.Minute), Job: 2, Folder: "/srv/captures", Path: "/srv/captures/b.ply", Stage: state.Failed, Text: "failed: invalid PLY header"},
				{Time: t0.Add(-2 * time.Minute), Job: 1, Folder: "/srv/captures", Path: "/srv/captures/a.ply", Stage: state.Done, Text: "done: https://viewer.example/view?id=h1"},
			},
		},
		jobs: []Job{
			{ID: 3, Path: "/srv/captures/c.ply", Size: 40, Stage: state.Signed, Progress: &Progress{Sent: 10, Size: 40}, Activity: "uploading 10 B of 40 B (25 %)", UpdatedAt: t0},
			{ID: 2, Path: "/srv/captures/b.ply", Stage: state.Failed, Attempts: 1, FailReason: "invalid PLY header", UpdatedAt: t0.Add(-time.Minute)},
			{ID: 1, Path: "/srv/captures/a.ply", Stage: state.Done, ViewerURL: "https://viewer.example/view?id=h1", UpdatedAt: t0.Add(-2 * time.Minute)},
		},
	}
}

func TestAPIStatus(t *testing.T) {
	t.Parallel()
	src := sampleSource()
	src.status.Token = Token{State: TokenRefused, Advice: "replace /etc/splatd/token; the API said: Bearer abcdef123456 is not valid"}
	h := statusHandler(t, ServerOptions{
		Status: src,
		Ready: func() error {
			return errors.Join(errors.New("watch folders not (yet) scanned and watched"), errors.New("the API refuses the token"))
		},
	}, true)

	r := do(t, h, "/api/status")
	if r.code != http.StatusOK {
		t.Fatalf("/api/status = %d %s", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	st := decode[Status](t, r.body)
	if st.Version != "v1.2.3" || st.Protocol != "v1" || len(st.Watched) != 1 || st.Watched[0].Path != "/srv/captures" {
		t.Errorf("status = %+v", st)
	}
	if len(st.Pacing) != 1 || st.Pacing[0] != src.status.Pacing[0] {
		t.Errorf("pacing = %+v, want %+v", st.Pacing, src.status.Pacing)
	}
	if st.Bandwidth != src.status.Bandwidth {
		t.Errorf("bandwidth = %+v", st.Bandwidth)
	}
	for _, s := range state.Stages {
		if _, ok := st.Queue[s]; !ok {
			t.Errorf("queue lacks stage %s: %v", s, st.Queue)
		}
	}
	if st.Queue[state.Queued] != 3 || st.Queue[state.Done] != 7 || st.Queue[state.Failed] != 0 {
		t.Errorf("queue = %v", st.Queue)
	}
	want := Readiness{Ready: false, Reasons: []string{"watch folders not (yet) scanned and watched", "the API refuses the token"}}
	if st.Ready.Ready || !slices.Equal(st.Ready.Reasons, want.Reasons) {
		t.Errorf("ready = %+v, want %+v", st.Ready, want)
	}
	if st.Token.State != TokenRefused || strings.Contains(r.body, "abcdef123456") || !strings.Contains(st.Token.Advice, "/etc/splatd/token") {
		t.Errorf("token = %+v", st.Token)
	}
}

func TestAPIStatusDefaults(t *testing.T) {
	t.Parallel()
	// A source that knows nothing yet still gives a complete document:
	// lists are [] not null, the token state is "unknown", ready is true
	// without a Ready func.
	h := statusHandler(t, ServerOptions{Status: &fakeSource{}}, true)
	r := do(t, h, "/api/status")
	if r.code != http.StatusOK {
		t.Fatalf("/api/status = %d %s", r.code, r.body)
	}
	for _, want := range []string{`"watched":[]`, `"pacing":[]`, `"state":"unknown"`, `"ready":{"ready":true}`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("body lacks %s: %s", want, r.body)
		}
	}
	if r := do(t, h, "/api/status?x=1"); r.code != http.StatusBadRequest {
		t.Errorf("/api/status?x=1 = %d, want 400", r.code)
	}
}

func TestAPIJobsQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		query   string
		code    int
		stages  []state.Stage
		limit   int
		errText string
	}{
		{name: "defaults", query: "", code: 200, limit: defaultJobLimit},
		{name: "one stage", query: "stage=failed", code: 200, stages: []state.Stage{state.Failed}, limit: defaultJobLimit},
		{name: "comma and repeat", query: "stage=done,failed&stage=held", code: 200, stages: []state.Stage{state.Done, state.Failed, state.Held}, limit: defaultJobLimit},
		{name: "empty stage is all", query: "stage=", code: 200, limit: defaultJobLimit},
		{name: "limit", query: "limit=5&stage=done", code: 200, stages: []state.Stage{state.Done}, limit: 5},
		{name: "max limit", query: "limit=1000", code: 200, limit: maxJobLimit},
		{name: "unknown stage", query: "stage=finished", code: 400, errText: `unknown stage "finished"`},
		{name: "zero limit", query: "limit=0", code: 400, errText: "from 1 to 1000"},
		{name: "negative limit", query: "limit=-3", code: 400, errText: "from 1 to 1000"},
		{name: "word limit", query: "limit=all", code: 400, errText: `limit "all"`},
		{name: "limit too large", query: "limit=10000", code: 400, errText: "from 1 to 1000"},
		{name: "limit twice", query: "limit=1&limit=2", code: 400, errText: "more than once"},
		{name: "misspelt parameter", query: "stages=failed", code: 400, errText: `unknown query parameter "stages"`},
		{name: "bad escape", query: "stage=%zz", code: 400, errText: "query"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := sampleSource()
			h := statusHandler(t, ServerOptions{Status: src}, true)
			r := do(t, h, "/api/jobs?"+tc.query)
			if r.code != tc.code {
				t.Fatalf("code = %d %s, want %d", r.code, r.body, tc.code)
			}
			if r.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", r.header.Get("Content-Type"))
			}
			if tc.code != 200 {
				e := decode[struct{ Error string }](t, r.body)
				if !strings.Contains(e.Error, tc.errText) {
					t.Errorf("error = %q, want it to contain %q", e.Error, tc.errText)
				}
				if q := src.lastQuery(); q.Limit != 0 {
					t.Errorf("source asked %+v for a bad query", q)
				}
				return
			}
			q := src.lastQuery()
			if !slices.Equal(q.Stages, tc.stages) || q.Limit != tc.limit {
				t.Errorf("source got %+v, want stages %v limit %d", q, tc.stages, tc.limit)
			}
		})
	}
}

func TestAPIJobsBody(t *testing.T) {
	t.Parallel()
	h := statusHandler(t, ServerOptions{Status: sampleSource()}, true)

	r := do(t, h, "/api/jobs?stage=signed,done")
	if r.code != http.StatusOK {
		t.Fatalf("/api/jobs = %d %s", r.code, r.body)
	}
	list := decode[JobList](t, r.body)
	if list.Total != 2 || len(list.Jobs) != 2 {
		t.Fatalf("list = %+v", list)
	}
	up, done := list.Jobs[0], list.Jobs[1]
	if up.ID != 3 || up.Progress == nil || *up.Progress != (Progress{Sent: 10, Size: 40}) || up.Stage != state.Signed {
		t.Errorf("uploading job = %+v", up)
	}
	if done.ID != 1 || done.ViewerURL != "https://viewer.example/view?id=h1" || done.Progress != nil || !done.UpdatedAt.Equal(t0.Add(-2*time.Minute)) {
		t.Errorf("done job = %+v", done)
	}
	for _, key := range []string{`"id"`, `"path"`, `"stage"`, `"attempts"`, `"updated_at"`, `"progress":{"sent":10,"size":40,"rate_bytes_per_second":0}`, `"viewer_url"`} {
		if !strings.Contains(r.body, key) {
			t.Errorf("body lacks %s", key)
		}
	}

	// No match is an empty list, not null.
	if r := do(t, h, "/api/jobs?stage=held"); !strings.Contains(r.body, `"jobs":[]`) || !strings.Contains(r.body, `"total":0`) {
		t.Errorf("empty list body = %s", r.body)
	}
}

func TestAPIJobsLimitHoldsForASourceThatIgnoresIt(t *testing.T) {
	t.Parallel()
	src := &fakeSource{ignoreLimit: true}
	for i := range 50 {
		src.jobs = append(src.jobs, Job{ID: uint64(i + 1), Stage: state.Queued})
	}
	h := statusHandler(t, ServerOptions{Status: src}, true)
	list := decode[JobList](t, do(t, h, "/api/jobs?limit=7").body)
	if len(list.Jobs) != 7 || list.Total != 50 {
		t.Errorf("got %d jobs, total %d; want 7 of 50", len(list.Jobs), list.Total)
	}
}

func TestAPISourceError(t *testing.T) {
	t.Parallel()
	src := &fakeSource{err: errors.New("bbolt: reading https://st.example/k?X-Amz-Signature=f00dfeedf00dfeed failed")}
	h := statusHandler(t, ServerOptions{Status: src}, true)
	for _, path := range []string{"/api/status", "/api/jobs"} {
		r := do(t, h, path)
		if r.code != http.StatusInternalServerError || !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s = %d %s, want 500 with a JSON error", path, r.code, r.body)
		}
		if strings.Contains(r.body, "f00dfeed") {
			t.Errorf("%s leaks the signature: %s", path, r.body)
		}
	}
}

// TestStatusLeaksNoSecret is the contract's "never a token, a signed URL or
// its query": a job whose texts carry a signed storage URL, a bare signed
// query and a bearer token, and whose viewer link carries extra parameters,
// reaches neither the API nor the page with any of them.
func TestStatusLeaksNoSecret(t *testing.T) {
	t.Parallel()
	const (
		sig    = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
		cred   = "AKIAIOSFODNN7EXAMPLE"
		bearer = "tok_live_abcdefghijkl"
	)
	signed := "https://storage.example/bucket/up/a.ply?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + cred + "%2F20251123%2Fus-east-1&X-Amz-Signature=" + sig
	src := &fakeSource{
		status: Status{Token: Token{State: TokenRefused, Advice: "the API refused Authorization: Bearer " + bearer}},
		jobs: []Job{{
			ID: 1, Path: "/srv/a.ply", Stage: state.Failed,
			LastError:  "storage PUT " + signed + ": 403 SignatureDoesNotMatch",
			FailReason: `storage said: <StringToSign>PUT</StringToSign> query "X-Amz-Credential=` + cred + `&X-Amz-Signature=` + sig + `"`,
			ViewerURL:  "https://user:pw@viewer.example/view?id=h1&X-Amz-Signature=" + sig + "#token=" + bearer,
		}},
	}
	h := statusHandler(t, ServerOptions{Status: src}, true)

	// The view built from a stored job never holds the signed upload URL.
	sj := state.Job{ID: 9, File: state.File{Path: "/srv/b.ply"}, Stage: state.Signed, Upload: state.Upload{URL: signed, Key: "up/b.ply"}}
	b, err := json.Marshal(JobFromState(sj))
	if err != nil {
		t.Fatal(err)
	}

	bodies := map[string]string{
		"JobFromState": string(b),
		"/api/jobs":    do(t, h, "/api/jobs").body,
		"/api/status":  do(t, h, "/api/status").body,
		"/":            do(t, h, "/").body,
	}
	for where, body := range bodies {
		for _, secret := range []string{sig, cred, bearer, "X-Amz-Signature=" + sig[:8], "user:pw", "storage.example/bucket/up/b.ply"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s leaks %q:\n%s", where, secret, body)
			}
		}
	}

	list := decode[JobList](t, bodies["/api/jobs"])
	j := list.Jobs[0]
	if j.ViewerURL != "https://viewer.example/view?id=h1" {
		t.Errorf("viewer link = %q, want https://viewer.example/view?id=h1", j.ViewerURL)
	}
	if !strings.Contains(j.LastError, "https://storage.example/bucket/up/a.ply?REDACTED: 403 SignatureDoesNotMatch") {
		t.Errorf("last error = %q: the redacted URL should stay readable", j.LastError)
	}
}

func TestViewerLink(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"https://superspl.at/scene/abc123", "https://superspl.at/scene/abc123"},
		{"https://playcanvas.com/view?id=h1", "https://playcanvas.com/view?id=h1"},
		{"http://127.0.0.1:8443/view?id=h1", "http://127.0.0.1:8443/view?id=h1"},
		{"https://v.example/view?id=h1&X-Amz-Signature=s", "https://v.example/view?id=h1"},
		{"https://v.example/view?token=t", "https://v.example/view"},
		{"https://v.example/view?id=h1&id=h2", "https://v.example/view"},
		{"https://v.example/view?id=%3Cscript%3E", "https://v.example/view"},
		{"https://u:p@v.example/s#x", "https://v.example/s"},
		{"javascript:alert(1)", ""},
		{"data:text/html,hi", ""},
		{"//v.example/s", ""},
		{"/view?id=h1", ""},
		{"https:///nohost", ""},
	}
	for _, tc := range tests {
		if got := viewerLink(tc.in); got != tc.want {
			t.Errorf("viewerLink(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStatusAccess(t *testing.T) {
	t.Parallel()
	const token = "s3cret-status-token"
	good := func() (string, error) { return token, nil }
	broken := func() (string, error) { return "", errors.New("open /etc/splatd/status-token: permission denied") }

	tests := []struct {
		name     string
		loopback bool
		token    func() (string, error)
		auth     string
		code     int
	}{
		{name: "loopback needs nothing", loopback: true, code: 200},
		{name: "loopback ignores a token", loopback: true, token: good, code: 200},
		{name: "exposed without token file is off", loopback: false, code: 403},
		{name: "exposed, header but no token file", loopback: false, auth: "Bearer " + token, code: 403},
		{name: "exposed, unreadable token file", loopback: false, token: broken, auth: "Bearer " + token, code: 403},
		{name: "exposed, no header", loopback: false, token: good, code: 401},
		{name: "exposed, wrong token", loopback: false, token: good, auth: "Bearer nope", code: 401},
		{name: "exposed, token prefix", loopback: false, token: good, auth: "Bearer " + token[:5], code: 401},
		{name: "exposed, basic auth", loopback: false, token: good, auth: "Basic " + token, code: 401},
		{name: "exposed, empty bearer", loopback: false, token: func() (string, error) { return "", nil }, auth: "Bearer ", code: 401},
		{name: "exposed, right token", loopback: false, token: good, auth: "Bearer " + token, code: 200},
		{name: "exposed, scheme case-insensitive", loopback: false, token: good, auth: "bearer " + token, code: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := statusHandler(t, ServerOptions{Status: sampleSource(), StatusToken: tc.token}, tc.loopback)
			for _, path := range []string{"/", "/api/status", "/api/jobs"} {
				var hdr []string
				if tc.auth != "" {
					hdr = []string{"Authorization", tc.auth}
				}
				r := do(t, h, path, hdr...)
				if r.code != tc.code {
					t.Errorf("%s = %d %s, want %d", path, r.code, r.body, tc.code)
				}
				if r.code == 401 && r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: 401 without WWW-Authenticate", path)
				}
				if r.code != 200 && strings.Contains(r.body, "/srv/captures") {
					t.Errorf("%s: refused answer shows data: %s", path, r.body)
				}
				if r.code == 403 && !strings.Contains(r.body, "status.token_file") {
					t.Errorf("%s: 403 does not say how to turn it on: %s", path, r.body)
				}
				if strings.HasPrefix(path, "/api/") && r.header.Get("Content-Type") != "application/json" {
					t.Errorf("%s: refusal is %q, want JSON", path, r.header.Get("Content-Type"))
				}
			}
			// Scrapers and probes are never asked for the token.
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				if r := do(t, h, path); r.code != http.StatusOK {
					t.Errorf("%s = %d, want 200", path, r.code)
				}
			}
		})
	}
}

func TestStatusRefusesForeignHostOnLoopback(t *testing.T) {
	t.Parallel()
	h := statusHandler(t, ServerOptions{Status: sampleSource()}, true)
	tests := []struct {
		host string
		code int
	}{
		{"127.0.0.1:9464", 200},
		{"localhost:9464", 200},
		{"LOCALHOST.", 200},
		{"[::1]:9464", 200},
		{"127.0.0.1", 200},
		// A rebinding attacker's page asks with its own name.
		{"attacker.example:9464", 403},
		{"localhost.attacker.example", 403},
		{"10.0.0.5:9464", 403},
	}
	for _, tc := range tests {
		for _, path := range []string{"/", "/api/status", "/api/jobs"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Host = tc.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("Host %s %s = %d, want %d", tc.host, path, rec.Code, tc.code)
			}
		}
		// Probes and scrapers are not browsers' business; they stay open.
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("Host %s /metrics = %d, want 200", tc.host, rec.Code)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.53", true},
		{"::1", true},
		{"0.0.0.0", false},
		{"::", false},
		{"192.168.1.20", false},
		{"fe80::1", false},
	}
	for _, tc := range tests {
		if got := isLoopback(&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 9464}); got != tc.want {
			t.Errorf("isLoopback(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

// TestServerStatusOnLoopbackListener checks the rule end to end: a server
// bound to 127.0.0.1 serves the status endpoints without a token.
func TestServerStatusOnLoopbackListener(t *testing.T) {
	t.Parallel()
	reg, _ := NewRegistry("test", testRoutes)
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", Registry: reg, Logger: zerolog.Nop(), Status: sampleSource(),
		StatusToken: func() (string, error) { return "unused", nil }})
	runServer(t, s)
	for _, path := range []string{"/", "/api/status", "/api/jobs"} {
		if code, body := get(t, "http://"+s.Addr()+path); code != http.StatusOK {
			t.Errorf("%s = %d %s, want 200", path, code, body)
		}
	}
}

func TestServerWithoutStatusSource(t *testing.T) {
	t.Parallel()
	h := statusHandler(t, ServerOptions{}, true)
	if r := do(t, h, "/"); r.code != http.StatusOK || !strings.Contains(r.body, `href="/metrics"`) {
		t.Errorf("/ = %d %s, want the links page", r.code, r.body)
	}
	for _, path := range []string{"/api/status", "/api/jobs"} {
		if r := do(t, h, path); r.code != http.StatusNotFound {
			t.Errorf("%s = %d, want 404", path, r.code)
		}
	}
}

func TestTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "status-token")
	read := TokenFile(path)

	if _, err := read(); err == nil || !strings.Contains(err.Error(), "status-token") {
		t.Errorf("missing file: err = %v", err)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first\n")
	if tok, err := read(); tok != "first" || err != nil {
		t.Errorf("read = %q, %v; want first", tok, err)
	}
	// Rotation applies on the next call, without a restart.
	write("  second  \n")
	if tok, err := read(); tok != "second" || err != nil {
		t.Errorf("after rotation read = %q, %v; want second", tok, err)
	}
	write("\n")
	if _, err := read(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: err = %v", err)
	}
	write(strings.Repeat("x", maxTokenFile+1))
	if _, err := read(); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("large file: err = %v", err)
	}
}

func TestPageHeadersAndLinks(t *testing.T) {
	t.Parallel()
	h := statusHandler(t, ServerOptions{Status: sampleSource()}, true)
	r := do(t, h, "/")
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("/ = %d %q", r.code, r.header.Get("Content-Type"))
	}
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "script-src 'sha256-", "style-src 'sha256-"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, want := range []string{`href="metrics"`, `href="healthz"`, `href="readyz"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks link %s", want)
		}
	}
	// The page's script builds the document with textContent and
	// setAttribute; any of these would be a way for a path or an error text
	// to become markup, or the page to fetch from elsewhere. (The rendered
	// page holds viewer links: the template is what is checked.)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "http://", "https://"} {
		if strings.Contains(string(statusPage), bad) {
			t.Errorf("page contains %q", bad)
		}
	}
}

// runServer runs s (already configured) until the test ends.
func runServer(t *testing.T, s *Server) {
	t.Helper()
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	})
}

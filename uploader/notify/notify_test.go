package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
)

// countObserver counts NotifyError calls by kind.
type countObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *countObserver) NotifyError(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[kind]++
}

func (o *countObserver) count(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[kind]
}

// logBuffer is a log sink safe for the Notifier's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Secrets that must never reach a receiver.
const (
	apiToken  = "tok-SECRET-api-token"
	signature = "SIG-SECRET-signed-url"
)

// finalJob is a job as the store holds it at the end, carrying a signed
// URL (a bearer secret) that no notification may repeat.
func finalJob(stage state.Stage) state.Job {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return state.Job{
		ID: 42, File: state.File{Path: "/srv/captures/clientA/hall.ply", Root: "/srv/captures/clientA", Size: 1234, SHA256: "abc123"}, Stage: stage,
		Params:  state.PublishParams{Title: "Hall", Format: "sog"},
		Upload:  state.Upload{URL: "https://storage.example/up?X-Amz-Signature=" + signature, Key: "k"},
		Splat:   state.Splat{SplatID: "50", SplatHash: "h4sh", ViewerURL: "https://viewer.example/view?id=h4sh", PublishedAt: &now, CompletedAt: &now},
		Failure: state.Failure{FailReason: "invalid file: garbage"},
	}
}

func receiptOf(stage state.Stage) after.Receipt {
	return after.New(after.Options{}).Receipt(finalJob(stage))
}

// fastRetries keeps the tests' retries short; they count tries, never time.
var fastRetries = state.Backoff{Base: time.Millisecond, Cap: 2 * time.Millisecond, Jitter: state.NoJitter}

func newTest(t *testing.T, o Options) (*Notifier, *countObserver, *logBuffer) {
	t.Helper()
	obs, logs := &countObserver{}, &logBuffer{}
	o.Observer = obs
	o.Logger = zerolog.New(logs)
	if o.Policy.Patience == nil {
		o.Policy = o.Policy.With(state.ProfileWebhook, fastRetries)
	}
	if o.Grace == 0 {
		o.Grace = time.Hour // drain waits for every delivery, however slow the machine
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- n.Run(ctx) }()
	running.Store(n, &run{stop: stop, ran: ran})
	t.Cleanup(func() { stopRun(n) })
	return n, obs, logs
}

// run is a test's Run of a Notifier: its stop, and where its result comes.
type run struct {
	stop context.CancelFunc
	ran  chan error
	once sync.Once
	err  error
}

// running maps each test's Notifier to its Run.
var running sync.Map

// stopRun ends n's Run and returns its result.
func stopRun(n *Notifier) error {
	v, _ := running.Load(n)
	r := v.(*run)
	r.once.Do(func() {
		r.stop()
		r.err = <-r.ran
	})
	return r.err
}

// drain waits until every queued notification was delivered or given up:
// Run's context ends and its grace lets them out.
func drain(t *testing.T, n *Notifier) {
	t.Helper()
	if err := stopRun(n); err != nil {
		t.Fatal(err)
	}
}

type hit struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint answering the codes in turn (the last
// one from then on) and recording every request.
type receiver struct {
	mu    sync.Mutex
	codes []int
	hits  []hit
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rv.mu.Lock()
	rv.hits = append(rv.hits, hit{r.Header.Clone(), b})
	code := rv.codes[min(len(rv.hits), len(rv.codes))-1]
	rv.mu.Unlock()
	w.WriteHeader(code)
}

func (rv *receiver) got() []hit {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]hit(nil), rv.hits...)
}

func TestWebhookPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	rv := &receiver{codes: []int{204}}
	srv := httptest.NewServer(rv)
	defer srv.Close()
	n, obs, _ := newTest(t, Options{Webhook: srv.URL + "/hook", Headers: http.Header{"Authorization": {"Bearer receiver-own-secret"}}})
	for _, st := range []state.Stage{state.Done, state.Failed, state.Held} {
		n.Finished("/srv/captures/clientA", receiptOf(st))
	}
	dup := finalJob(state.Done)
	dup.DuplicateOf = 7
	n.Finished(dup.Root, after.New(after.Options{}).Receipt(dup))
	drain(t, n)

	hits := rv.got()
	if len(hits) != 4 || obs.count(KindWebhook) != 0 {
		t.Fatalf("%d requests, %d errors; want 4 and 0", len(hits), obs.count(KindWebhook))
	}
	var kinds []string
	for _, h := range hits {
		var ev map[string]any
		if err := json.Unmarshal(h.body, &ev); err != nil {
			t.Fatalf("body %s: %v", h.body, err)
		}
		kinds = append(kinds, ev["event"].(string))
		for _, key := range []string{"file", "size", "sha256", "title", "format", "splat", "status", "message", "published_at", "completed_at", "job", "time"} {
			if _, ok := ev[key]; !ok {
				t.Errorf("event lacks %q: %s", key, h.body)
			}
		}
		if ev["event"] != ev["status"] || ev["file"] != "/srv/captures/clientA/hall.ply" {
			t.Errorf("event = %s", h.body)
		}
		if h.header.Get("Authorization") != "Bearer receiver-own-secret" || h.header.Get("Content-Type") != "application/json" ||
			h.header.Get("X-Splatd-Event") != ev["event"] {
			t.Errorf("headers = %v", h.header)
		}
		if all := string(h.body) + headerText(h.header); strings.Contains(all, signature) || strings.Contains(all, apiToken) {
			t.Errorf("a secret reached the webhook: %s", all)
		}
	}
	if strings.Join(kinds, " ") != "done failed held duplicate" {
		t.Errorf("events %q, want done failed held duplicate in order", kinds)
	}
}

func headerText(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}

func TestWebhookRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		codes     []int
		wantHits  int
		wantError int
	}{
		{"transient then ok", []int{503, 429, 200}, 3, 0},
		{"always 500: five tries, then counted", []int{500}, 5, 1},
		{"408 is transient", []int{408, 200}, 2, 0},
		{"400 is final at once", []int{400}, 1, 1},
		{"404 is final at once", []int{404}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rv := &receiver{codes: tt.codes}
			srv := httptest.NewServer(rv)
			defer srv.Close()
			n, obs, _ := newTest(t, Options{Webhook: srv.URL})
			n.Finished("", receiptOf(state.Done))
			drain(t, n)
			if got := len(rv.got()); got != tt.wantHits || obs.count(KindWebhook) != tt.wantError {
				t.Errorf("%d tries, %d errors; want %d and %d", got, obs.count(KindWebhook), tt.wantHits, tt.wantError)
			}
		})
	}
}

// TestWebhookUnreachableLogsNoSecretPath: a network error is retried and
// counted, and the log names the host but not the URL's secret path.
func TestWebhookUnreachableLogsNoSecretPath(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/services/T000/B000/SECRETPATH?k=SECRETQUERY"
	srv.Close() // nothing listens there now
	n, obs, logs := newTest(t, Options{Webhook: url, Policy: state.Policy{Patience: map[state.Profile]state.Patience{
		state.ProfileWebhook: {Backoff: fastRetries, Tries: 2},
	}}})
	n.Finished("", receiptOf(state.Failed))
	drain(t, n)
	if obs.count(KindWebhook) != 1 {
		t.Errorf("errors = %d, want 1", obs.count(KindWebhook))
	}
	out := logs.String()
	if strings.Contains(out, "SECRETPATH") || strings.Contains(out, "SECRETQUERY") || !strings.Contains(out, "webhook failed") {
		t.Errorf("log:\n%s", out)
	}
}

// TestQueueOverflowIsCountedNotBlocking: with the receiver stuck, Finished
// still returns at once; what does not fit the queue is dropped and counted.
func TestQueueOverflowIsCountedNotBlocking(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	n, obs, _ := newTest(t, Options{Webhook: srv.URL, Queue: 1})
	n.Finished("", receiptOf(state.Done))
	<-arrived                             // the first is in flight, out of the queue
	n.Finished("", receiptOf(state.Done)) // fills the queue
	n.Finished("", receiptOf(state.Done)) // dropped
	n.Finished("", receiptOf(state.Done)) // dropped
	if obs.count(KindWebhook) != 2 {
		t.Errorf("dropped count = %d, want 2", obs.count(KindWebhook))
	}
	close(release)
	drain(t, n)
	if len(arrived) != 1 { // the queued one; the first was taken above
		t.Errorf("%d more requests after release, want 1", len(arrived))
	}
}

func TestRunAbandonsAfterItsGrace(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer srv.Close()
	// Retries an hour apart: only the deadline can end the delivery.
	// No grace: the drain abandons at once.
	n, obs, _ := newTest(t, Options{Webhook: srv.URL, Grace: -1, Policy: state.Policy{}.With(state.ProfileWebhook, state.Backoff{Base: time.Hour, Cap: time.Hour})})
	n.Finished("", receiptOf(state.Done))
	if err := stopRun(n); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run without grace = %v, want context.DeadlineExceeded", err)
	}
	if obs.count(KindWebhook) > 1 {
		t.Errorf("errors = %d", obs.count(KindWebhook))
	}
	n.Finished("", receiptOf(state.Done)) // after Run: ignored, no panic
	if err := n.Run(context.Background()); err == nil {
		t.Error("a second Run = nil, want an error")
	}
}

func needShell(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
}

func TestExecGetsEventOnStdinAndEnv(t *testing.T) {
	t.Parallel()
	needShell(t)
	dir := t.TempDir()
	stdin, env := filepath.Join(dir, "stdin.json"), filepath.Join(dir, "env")
	n, obs, logs := newTest(t, Options{
		Exec: func(root string) Command {
			if root != "/srv/captures/clientA" {
				return Command{}
			}
			return Command{Argv: []string{"sh", "-c", `cat > "$1"; env > "$2"; echo hello from the hook`, "sh", stdin, env}}
		},
		Environ: func() []string {
			return []string{"PATH=" + os.Getenv("PATH"), "SPLATD_TOKEN=" + apiToken, "SPLATD_EVENT=stale", "KEEP=me"}
		},
	})
	n.Finished("/srv/captures/clientA", receiptOf(state.Failed))
	n.Finished("/elsewhere", receiptOf(state.Done)) // no command for this root
	drain(t, n)

	var ev Event
	b, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ev); err != nil || ev.Event != "failed" || ev.File != "/srv/captures/clientA/hall.ply" || ev.Message != "invalid file: garbage" || ev.Job != 42 {
		t.Errorf("stdin = %s (%v)", b, err)
	}
	e, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SPLATD_EVENT=failed\n", "SPLATD_FILE=/srv/captures/clientA/hall.ply\n", "SPLATD_JOB=42\n", "KEEP=me\n"} {
		if !strings.Contains(string(e), want) {
			t.Errorf("env lacks %q:\n%s", want, e)
		}
	}
	if strings.Contains(string(e), apiToken) || strings.Contains(string(e), "stale") || strings.Contains(string(b), signature) {
		t.Errorf("the command saw a secret or a stale variable:\n%s\n%s", e, b)
	}
	if obs.count(KindExec) != 0 || !strings.Contains(logs.String(), "hello from the hook") {
		t.Errorf("errors = %d; log:\n%s", obs.count(KindExec), logs.String())
	}
}

func TestExecFailuresAreCounted(t *testing.T) {
	t.Parallel()
	needShell(t)
	tests := []struct {
		name string
		cmd  Command
		want string
	}{
		{"exit status", Command{Argv: []string{"sh", "-c", "echo broken >&2; exit 3"}}, "exit status 3"},
		{"timeout", Command{Argv: []string{"sleep", "60"}, Timeout: 50 * time.Millisecond}, "killed after its timeout of 50ms"},
		{"no such program", Command{Argv: []string{filepath.Join(t.TempDir(), "missing")}}, "no such file"},
		{"output capped", Command{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 500 ]; do echo 0123456789; i=$((i+1)); done; exit 1"}}, "more bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, obs, logs := newTest(t, Options{Exec: func(string) Command { return tt.cmd }, OutputLimit: 100})
			n.Finished("", receiptOf(state.Done))
			drain(t, n)
			if obs.count(KindExec) != 1 || !strings.Contains(logs.String(), tt.want) {
				t.Errorf("errors = %d; log lacks %q:\n%s", obs.count(KindExec), tt.want, logs.String())
			}
		})
	}
}

func TestReadHeaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "h")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	h, err := ReadHeaders(write("# the receiver's key\n\nAuthorization: Bearer abc: def\nX-Team:  studio \n"))
	if err != nil || h.Get("Authorization") != "Bearer abc: def" || h.Get("X-Team") != "studio" {
		t.Errorf("ReadHeaders = %v, %v", h, err)
	}
	for body, want := range map[string]string{
		"no colon here\n":       "line 1: want",
		"Bad Name: x\n":         "line 1: want",
		"\nHost: example.com\n": "line 2: Host is set by splatd",
	} {
		if _, err := ReadHeaders(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", body, err, want)
		}
	}
}

func TestNewRefusesNonHTTPWebhook(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Webhook: "ftp://example.com/x"}); err == nil {
		t.Error("ftp webhook accepted")
	}
}

// TestWebhookFollowsNoRedirect: a 3xx is a failed delivery with its status,
// tried again like a transient answer; the host it points to (here a
// second server) never sees the event, its headers or a Referer.
func TestWebhookFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	elsewhere := &receiver{codes: []int{200}}
	other := httptest.NewServer(elsewhere)
	defer other.Close()
	for _, code := range []int{301, 302, 307, 308} {
		var mu sync.Mutex
		var hits int
		var referers []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits++
			referers = append(referers, r.Header.Get("Referer"))
			mu.Unlock()
			http.Redirect(w, r, other.URL+"/stolen", code)
		}))
		n, obs, logs := newTest(t, Options{Webhook: srv.URL + "/hook/SECRET-path", Headers: http.Header{"X-Receiver-Auth": {"hdr-secret"}}})
		n.Finished("", receiptOf(state.Done))
		drain(t, n)
		srv.Close()
		mu.Lock()
		if tries := state.DefaultPatience[state.ProfileWebhook].Tries; hits != tries || obs.count(KindWebhook) != 1 {
			t.Errorf("%d: %d tries, %d errors; want %d tries, 1 error", code, hits, obs.count(KindWebhook), state.DefaultPatience[state.ProfileWebhook].Tries)
		}
		for _, r := range referers {
			if r != "" {
				t.Errorf("%d: Referer %q sent", code, r)
			}
		}
		mu.Unlock()
		if !strings.Contains(logs.String(), fmt.Sprint(code)) {
			t.Errorf("%d: the failure does not name the status:\n%s", code, logs.String())
		}
	}
	if got := elsewhere.got(); len(got) != 0 {
		t.Errorf("the redirect target got %d requests (first headers %v)", len(got), got[0].header)
	}
}

// TestExecEnvironmentHasNoCredentials: CREDENTIALS_DIRECTORY and every
// variable whose name names a credential are left out of an after.exec
// command's environment; ordinary ones are kept.
func TestExecEnvironmentHasNoCredentials(t *testing.T) {
	t.Parallel()
	n, _, _ := newTest(t, Options{Environ: func() []string {
		return []string{
			"PATH=/usr/bin", "HOME=/var/lib/splatd", "LANG=C.UTF-8", "PWD=/", "KEEP=me", "KEYBOARD_LAYOUT=us", "PASSAGE=1",
			"CREDENTIALS_DIRECTORY=/run/credentials/splatd.service", "SPLATD_TOKEN=x", "GITHUB_TOKEN=x",
			"AWS_SECRET_ACCESS_KEY=x", "AWS_ACCESS_KEY_ID=x", "DB_PASSWORD=x", "MYSQL_PWD_PASSWD=x", "SSH_AUTH_SOCK=x",
			"api_key=x", "STRIPE_APIKEY=x", "TLS_PRIVATE_PEM=x", "HOOK_SECRET=x", "PGPASS=x", "SESSION_COOKIE=x",
		}
	}})
	env := n.environ(Event{Event: "done", Receipt: receiptOf(state.Done)})
	got := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		got[k] = true
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "PWD", "KEEP", "KEYBOARD_LAYOUT", "PASSAGE", "SPLATD_EVENT", "SPLATD_FILE", "SPLATD_JOB"} {
		if !got[k] {
			t.Errorf("%s was dropped", k)
		}
	}
	for _, k := range []string{"CREDENTIALS_DIRECTORY", "SPLATD_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
		"DB_PASSWORD", "MYSQL_PWD_PASSWD", "SSH_AUTH_SOCK", "api_key", "STRIPE_APIKEY", "TLS_PRIVATE_PEM", "HOOK_SECRET", "SESSION_COOKIE"} {
		if got[k] {
			t.Errorf("%s reached the command", k)
		}
	}
}

package main

// Helpers of the end-to-end tests (e2e_test.go): the splatd binary built
// once, the simulator started in-process, configs written to temp dirs, and
// a daemon process whose stderr log the tests read and search.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// e2eVersion is stamped into the test binary, so that build_info can be
// checked for the value the build was given.
const e2eVersion = "e2e-test"

// Deadlines of the waits. They are generous on purpose: a slow CI machine
// must make the tests slower, never flaky. No test asserts a duration.
const (
	e2eWait = 60 * time.Second
	e2ePoll = 50 * time.Millisecond
)

var (
	e2eBuildOnce sync.Once
	e2eBin       string
	e2eBuildErr  error
	e2eBinDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBinDir != "" {
		os.RemoveAll(e2eBinDir)
	}
	os.Exit(code)
}

// splatdBinary builds ./cmd/splatd once per test run (plain build, no -race:
// the daemon is the system under test, the race detector runs in the test
// process with the simulator) and returns its path.
func splatdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the splatd binary (skipped with -short)")
	}
	e2eBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "splatd-e2e-bin-")
		if err != nil {
			e2eBuildErr = err
			return
		}
		e2eBinDir = dir
		bin := filepath.Join(dir, "splatd")
		gobin, err := exec.LookPath("go")
		if err != nil {
			e2eBuildErr = err
			return
		}
		cmd := exec.Command(gobin, "build", "-o", bin, "-ldflags", "-X main.version="+e2eVersion, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			e2eBuildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		e2eBin = bin
	})
	if e2eBuildErr != nil {
		t.Fatalf("building splatd: %v", e2eBuildErr)
	}
	return e2eBin
}

// e2eEnviron is the test process's environment without anything that would
// change how splatd finds its config, token, state or systemd, plus extra.
func e2eEnviron(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "SPLATD_"), k == "NOTIFY_SOCKET", k == "CREDENTIALS_DIRECTORY",
			k == "STATE_DIRECTORY", strings.HasPrefix(k, "WATCHDOG_"), k == "LISTEN_FDS", k == "LISTEN_PID":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// newE2ESim starts the simulator with its files in a temp dir and a quiet
// logger; it is closed when the test ends.
func newE2ESim(t *testing.T, o apisim.Options) *apisim.Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	o.Logger = zerolog.Nop()
	if o.ProcessingDelay == 0 {
		o.ProcessingDelay = 300 * time.Millisecond
	}
	sim, err := apisim.New(o)
	if err != nil {
		t.Fatalf("apisim.New: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

// e2eEnv is one daemon's world: its folders, token file and config.
type e2eEnv struct {
	t         *testing.T
	dir       string
	inbox     string
	pollInbox string // a second watch root in poll mode, when asked for
	stateDir  string
	tokenFile string
	cfgPath   string
	sim       *apisim.Server
}

// e2eConfig holds the knobs the tests vary; zero values mean the defaults
// written by writeConfig.
type e2eConfig struct {
	protocol    string // api.protocol; "" leaves the default (legacy)
	workers     int
	logLevel    string
	noTokenFile bool   // leave api.token_file out (systemd credential test)
	stateDir    string // instead of <dir>/state
	inbox       string // the watch folder instead of <dir>/inbox (one a fleet shares)
	pollEvery   string // poll.interval
	pollRoot    bool   // add a second watch root in mode: poll
	extra       string // appended YAML
}

// newE2EEnv makes the folders, writes the simulator's token to a token
// file and writes the config.
func newE2EEnv(t *testing.T, sim *apisim.Server, c e2eConfig) *e2eEnv {
	t.Helper()
	dir := t.TempDir()
	e := &e2eEnv{
		t: t, dir: dir, sim: sim,
		inbox:     filepath.Join(dir, "inbox"),
		stateDir:  filepath.Join(dir, "state"),
		tokenFile: filepath.Join(dir, "token"),
		cfgPath:   filepath.Join(dir, "config.yaml"),
	}
	if c.stateDir != "" {
		e.stateDir = c.stateDir
	}
	if c.inbox != "" {
		e.inbox = c.inbox
	}
	if err := os.MkdirAll(e.inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	e.setToken(sim.Token())
	if c.workers == 0 {
		c.workers = 2
	}
	if c.logLevel == "" {
		c.logLevel = "info"
	}
	if c.pollEvery == "" {
		c.pollEvery = "200ms"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "api:\n  base_url: %s\n  ca_file: %s\n  timeout: 30s\n", sim.URL(), sim.CAFile())
	if c.protocol != "" {
		fmt.Fprintf(&b, "  protocol: %s\n", c.protocol)
	}
	if !c.noTokenFile {
		fmt.Fprintf(&b, "  token_file: %s\n", e.tokenFile)
	}
	fmt.Fprintf(&b, "watch:\n  - path: %s\n    recursive: true\n", e.inbox)
	if c.pollRoot {
		e.pollInbox = filepath.Join(dir, "nfs-inbox")
		if err := os.MkdirAll(e.pollInbox, 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  - path: %s\n    mode: poll\n    poll_interval: 200ms\n", e.pollInbox)
	}
	fmt.Fprintf(&b, "settle: 300ms\nrescan_interval: 1m\nstate_dir: %s\nworkers: %d\n", e.stateDir, c.workers)
	maxPoll := "500ms"
	if d, err := time.ParseDuration(c.pollEvery); err == nil && d > 500*time.Millisecond {
		maxPoll = c.pollEvery
	}
	fmt.Fprintf(&b, "poll: {interval: %s, max_interval: %s, timeout: 5m}\n", c.pollEvery, maxPoll)
	fmt.Fprintf(&b, "metrics: {listen: \"127.0.0.1:0\"}\nlog: {level: %s, format: json}\n", c.logLevel)
	b.WriteString(c.extra)
	if err := os.WriteFile(e.cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *e2eEnv) setToken(tok string) {
	e.t.Helper()
	if err := os.WriteFile(e.tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for the exec copier and the test.
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

// daemon is one `splatd run` process.
type e2eDaemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *syncBuffer
	stdout *syncBuffer
	done   chan struct{}
	code   int // valid after done
}

// startDaemon runs `splatd run -config cfg` with the cleaned environment
// plus env. The process is killed when the test ends if still running.
func startDaemon(t *testing.T, cfg string, env ...string) *e2eDaemon {
	t.Helper()
	return startDaemonIn(t, "", cfg, env...)
}

// startDaemonIn is startDaemon with the working directory set to dir.
func startDaemonIn(t *testing.T, dir, cfg string, env ...string) *e2eDaemon {
	t.Helper()
	d := &e2eDaemon{t: t, stderr: &syncBuffer{}, stdout: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(splatdBinary(t), "run", "-config", cfg)
	d.cmd.Dir = dir
	d.cmd.Env = e2eEnviron(env...)
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start splatd: %v", err)
	}
	go func() {
		err := d.cmd.Wait()
		d.code = 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			d.code = ee.ExitCode() // -1 when killed by a signal
		case err != nil:
			d.code = -2
		}
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("splatd (pid %d) stderr:\n%s", d.cmd.Process.Pid, tailLines(d.stderr.String(), 60))
		} else if os.Getenv("SPLATD_E2E_LOGS") != "" { // for a reader of -v output
			t.Logf("splatd (pid %d) stderr:\n%s", d.cmd.Process.Pid, d.stderr.String())
		}
	})
	return d
}

func (d *e2eDaemon) log() string { return d.stderr.String() }

func (d *e2eDaemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// waitExit waits for the process to end and returns its exit code.
func (d *e2eDaemon) waitExit() int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(e2eWait):
		d.t.Fatalf("splatd did not exit within %s; log:\n%s", e2eWait, tailLines(d.log(), 40))
		return 0
	}
}

// stop sends SIGTERM and returns the exit code.
func (d *e2eDaemon) stop() int {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !d.exited() {
		d.t.Fatalf("SIGTERM: %v", err)
	}
	return d.waitExit()
}

// kill sends SIGKILL (a crash) and waits for the process to be gone.
func (d *e2eDaemon) kill() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.waitExit()
}

// logLines decodes the JSON log lines written so far (other lines, such as
// "splatd: ..." on a start failure, are skipped).
func (d *e2eDaemon) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(d.log()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// waitLogLine waits for a JSON log line whose message contains msg and
// returns it.
func (d *e2eDaemon) waitLogLine(msg string) map[string]any {
	d.t.Helper()
	var found map[string]any
	waitFor(d.t, "log line "+strconv.Quote(msg), func() bool {
		for _, l := range d.logLines() {
			if m, _ := l["message"].(string); strings.Contains(m, msg) {
				found = l
				return true
			}
		}
		if d.exited() {
			d.t.Fatalf("splatd exited (code %d) before logging %q; log:\n%s", d.code, msg, tailLines(d.log(), 40))
		}
		return false
	})
	return found
}

// waitStarted waits until the daemon logged that it started and where its
// metrics listener is; it returns that address.
func (d *e2eDaemon) waitStarted() string {
	d.t.Helper()
	d.waitLogLine("splatd started")
	l := d.waitLogLine("serving /metrics")
	addr, _ := l["addr"].(string)
	if addr == "" {
		d.t.Fatalf("metrics log line has no addr: %v", l)
	}
	return addr
}

// waitFor polls cond until it is true, failing the test after e2eWait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", e2eWait, what)
		}
		time.Sleep(e2ePoll)
	}
}

// e2eReceipt is the receipt's contract (docs/architecture.md), decoded independently
// of the uploader's type so that a renamed field shows here.
type e2eReceipt struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Title  string `json:"title"`
	Format string `json:"format"`
	Splat  struct {
		ID   string `json:"id"`
		Hash string `json:"hash"`
		URL  string `json:"url"`
	} `json:"splat"`
	Status      string     `json:"status"`
	Message     string     `json:"message"`
	PublishedAt *time.Time `json:"published_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// readReceipt returns the receipt of file, ok false while there is none.
func readReceipt(t *testing.T, file string) (e2eReceipt, bool) {
	t.Helper()
	b, err := os.ReadFile(file + ".splat.json")
	if errors.Is(err, os.ErrNotExist) {
		return e2eReceipt{}, false
	}
	if err != nil {
		t.Fatalf("read receipt: %v", err)
	}
	var r e2eReceipt
	if err := json.Unmarshal(b, &r); err != nil {
		// Receipts are written atomically: a half receipt is a bug.
		t.Fatalf("receipt of %s is not JSON: %v\n%s", file, err, b)
	}
	return r, true
}

// waitReceipt waits for file's receipt to exist with one of the statuses.
func waitReceipt(t *testing.T, file string, statuses ...string) e2eReceipt {
	t.Helper()
	var r e2eReceipt
	waitFor(t, "receipt of "+filepath.Base(file)+" with status "+strings.Join(statuses, "|"), func() bool {
		var ok bool
		r, ok = readReceipt(t, file)
		if !ok {
			return false
		}
		for _, s := range statuses {
			if r.Status == s {
				return true
			}
		}
		return false
	})
	return r
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeFileWith writes a sample file at once.
func writeFileWith(t *testing.T, path string, gen func(io.Writer) error) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := gen(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writePLY writes a plain 3DGS PLY with n splats; the bytes depend only on
// n, so distinct n give distinct content hashes.
func writePLY(t *testing.T, path string, n int) {
	t.Helper()
	writeFileWith(t, path, func(w io.Writer) error { return splatfile.WritePLY(w, n) })
}

// writeBigPLY makes a valid binary PLY of about size bytes without writing
// its body: the header declares n vertices of 62 floats (a 3DGS record),
// and Truncate extends the file with zeros (sparse, no disk I/O). It is
// made under a hidden .part name and renamed, as a copy tool does.
func writeBigPLY(t *testing.T, path string, size int64) int64 {
	t.Helper()
	var hdr strings.Builder
	const props = 62
	n := size / (props * 4)
	fmt.Fprintf(&hdr, "ply\nformat binary_little_endian 1.0\nelement vertex %d\n", n)
	names := []string{"x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"}
	for i := 0; i < 45; i++ {
		names = append(names, fmt.Sprintf("f_rest_%d", i))
	}
	names = append(names, "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
	for _, p := range names {
		fmt.Fprintf(&hdr, "property float %s\n", p)
	}
	hdr.WriteString("end_header\n")
	total := int64(hdr.Len()) + n*props*4
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".part")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(hdr.String()); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(total); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := splatfile.Check(tmp); err != nil {
		t.Fatalf("the big sample is not a valid PLY: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return total
}

// runCLI runs a splatd command to the end and returns its exit code,
// stdout and stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, splatdBinary(t), args...)
	cmd.Env = e2eEnviron(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("splatd %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("splatd %s did not finish within %s", strings.Join(args, " "), e2eWait)
	}
	return code, stdout.String(), stderr.String()
}

// e2eJob is a job as `splatd jobs -json` prints it.
type e2eJob struct {
	ID       uint64 `json:"id"`
	File     string `json:"file"`
	Stage    string `json:"stage"`
	Activity string `json:"activity"`
	Attempts int    `json:"attempts"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	Sent     int64  `json:"sent"`
	URL      string `json:"url"`
	Error    string `json:"error"`
	Adopted  bool   `json:"adopted"`
	AfterErr string `json:"after_error"`
	// RateLimit: why the job's next request waits on the rate limit.
	RateLimit      string     `json:"rate_limit"`
	RateLimitUntil *time.Time `json:"rate_limit_until"`
	WaitingFor     string     `json:"waiting_for"`
}

// adminJobs asks the daemon's admin socket directly (no process spawn), for
// the tight polls; the CLI is exercised by TestE2EJobsAndRetry.
func adminJobs(t *testing.T, stateDir string) ([]e2eJob, error) {
	t.Helper()
	sock := filepath.Join(stateDir, "splatd.sock")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://splatd/v1/jobs")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin socket: %s", resp.Status)
	}
	var jobs []e2eJob
	return jobs, json.NewDecoder(resp.Body).Decode(&jobs)
}

// httpGet fetches a URL of the metrics listener.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// promSample finds the value of metric name whose labels include want, in
// Prometheus text exposition; ok is false when no such sample exists.
func promSample(text, name string, want map[string]string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, val := line[:sp], line[sp+1:]
		metric, labels := series, ""
		if i := strings.IndexByte(series, '{'); i >= 0 {
			metric, labels = series[:i], strings.TrimSuffix(series[i+1:], "}")
		}
		if metric != name {
			continue
		}
		got := map[string]string{}
		for _, kv := range splitLabels(labels) {
			k, v, _ := strings.Cut(kv, "=")
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			got[k] = v
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		return f, true
	}
	return 0, false
}

// splitLabels splits `a="x",b="y,z"` on the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQ, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQ = !inQ
		case c == ',' && !inQ:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// assertNoSecrets checks a log for the token and for signed-URL queries.
func assertNoSecrets(t *testing.T, log string, tokens ...string) {
	t.Helper()
	for _, tok := range tokens {
		if tok != "" && strings.Contains(log, tok) {
			t.Errorf("the log contains the API token %q", tok)
		}
	}
	for _, s := range []string{"sig=", "sig%3D", "expires="} {
		if strings.Contains(log, s) {
			t.Errorf("the log contains a signed-URL query (%q):\n%s", s, grepLines(log, s))
		}
	}
}

func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

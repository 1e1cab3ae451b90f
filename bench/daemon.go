// Package bench holds splatd's proof suite: the benchmark figures that
// `make bench` prints and the reliability scenarios of `make torture`. Both
// run the real `splatd` binary as a child process against the API simulator
// (uploader/apisim) running in this process, on loopback only, and measure
// from the outside: the child's /proc status, its /metrics and /readyz, its
// receipts and state file, and the simulator's own counters.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// DaemonConfig is what the suite varies in a `splatd run` config file; the
// rest stays at the documented defaults.
type DaemonConfig struct {
	Sim         *apisim.Server
	Dir         string // holds token, config.yaml and, by default, inbox/ and state/
	Inbox       string // default Dir/inbox
	StateDir    string // default Dir/state
	Workers     int    // default 2
	Settle      time.Duration
	Poll        time.Duration // poll.interval; max_interval is 4× it
	OnUncertain string        // default republish (the product's default)
	Rescan      time.Duration // rescan_interval; 0 = default 5m
	LogLevel    string        // default info
	After       string        // the after: mapping in flow style; default {receipt: true}
	// Protocol is api.protocol ("legacy" or "v1"); empty leaves the key
	// out (the daemon's default, legacy).
	Protocol string
	// ParallelParts is upload.parallel_parts (v1); 0 leaves it out
	// (default 4).
	ParallelParts int
	// Encode is publish.encode; default off.
	Encode string
}

// Write fills the defaults and writes the token file and config.yaml,
// returning the config's path.
func (c *DaemonConfig) Write() (string, error) {
	if c.Inbox == "" {
		c.Inbox = filepath.Join(c.Dir, "inbox")
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(c.Dir, "state")
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Settle == 0 {
		c.Settle = 200 * time.Millisecond
	}
	if c.Poll == 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.OnUncertain == "" {
		c.OnUncertain = "republish"
	}
	if c.Rescan == 0 {
		c.Rescan = 5 * time.Minute
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.After == "" {
		c.After = "{receipt: true}"
	}
	if c.Encode == "" {
		c.Encode = "off"
	}
	for _, d := range []string{c.Dir, c.Inbox, c.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	token := filepath.Join(c.Dir, "token")
	if err := os.WriteFile(token, []byte(c.Sim.Token()+"\n"), 0o600); err != nil {
		return "", err
	}
	protocol, upload := "", ""
	if c.Protocol != "" {
		protocol = "\n  protocol: " + c.Protocol
	}
	if c.ParallelParts > 0 {
		upload = fmt.Sprintf("upload: {parallel_parts: %d}\n", c.ParallelParts)
	}
	cfg := fmt.Sprintf(`api:
  base_url: %s%s
  token_file: %s
  ca_file: %s
  timeout: 30s
watch:
  - path: %s
settle: %s
rescan_interval: %s
state_dir: %s
workers: %d
publish:
  on_uncertain: %s
  encode: %s
poll: {interval: %s, max_interval: %s, timeout: 10m}
after: %s
metrics: {listen: "127.0.0.1:0"}
log: {level: %s, format: json}
%s`, c.Sim.URL(), protocol, token, c.Sim.CAFile(), c.Inbox, c.Settle, c.Rescan, c.StateDir, c.Workers,
		c.OnUncertain, c.Encode, c.Poll, 4*c.Poll, c.After, c.LogLevel, upload)
	path := filepath.Join(c.Dir, "config.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// Daemon is one running `splatd run` child.
type Daemon struct {
	cmd     *exec.Cmd
	Started time.Time
	done    chan struct{}
	waitErr error

	mu        sync.Mutex
	addr      string // metrics listener, from the log
	errorLogs []string
	lines     int
	scans     []time.Duration // each "scan done" line's took_s
	adopted   int             // files adopted from their receipts (debug lines)
	scanned   chan struct{}   // a scan was logged
}

// StartDaemon runs `BIN run -config CFG`, appending its log (stderr) to
// logPath. The log is also scanned for the metrics address and error lines.
func StartDaemon(bin, cfg, logPath string) (*Daemon, error) {
	return startDaemonCmd(exec.Command(bin, "run", "-config", cfg), logPath)
}

// StartDaemonMemLimited is StartDaemon with the child's address space
// bounded to limit bytes (ulimit -v): a daemon that reads without bound
// dies of it, as under the unit's MemoryMax, instead of taking the host's
// memory. Not for a -race binary (its shadow memory needs far more).
func StartDaemonMemLimited(bin, cfg, logPath string, limit int64) (*Daemon, error) {
	return startDaemonCmd(exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -v %d && exec "$0" run -config "$1"`, limit>>10), bin, cfg), logPath)
}

func startDaemonCmd(cmd *exec.Cmd, logPath string) (*Daemon, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stdout = logf
	d := &Daemon{cmd: cmd, done: make(chan struct{}), scanned: make(chan struct{}, 1)}
	d.Started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			logf.Write(line)
			logf.Write([]byte{'\n'})
			d.scanLine(line)
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned
		d.waitErr = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	return d, nil
}

func (d *Daemon) scanLine(line []byte) {
	var ev struct {
		Level   string  `json:"level"`
		Message string  `json:"message"`
		Addr    string  `json:"addr"`
		Error   string  `json:"error"`
		TookS   float64 `json:"took_s"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines++
	if ev.Addr != "" && strings.HasPrefix(ev.Message, "serving /metrics") {
		d.addr = ev.Addr
	}
	if ev.Message == "adopted from its receipt: not published again" {
		d.adopted++
	}
	if ev.Message == "scan done" {
		d.scans = append(d.scans, time.Duration(ev.TookS*float64(time.Second)))
		select {
		case d.scanned <- struct{}{}:
		default:
		}
	}
	if ev.Level == "error" || ev.Level == "fatal" {
		d.errorLogs = append(d.errorLogs, ev.Message+": "+ev.Error)
	}
}

// WaitScan waits until the daemon has logged its n-th "scan done" (debug
// level) and returns that scan's own time.
func (d *Daemon) WaitScan(ctx context.Context, n int, timeout time.Duration) (time.Duration, error) {
	end := time.After(timeout)
	for {
		d.mu.Lock()
		if len(d.scans) >= n {
			took := d.scans[n-1]
			d.mu.Unlock()
			return took, nil
		}
		d.mu.Unlock()
		select {
		case <-d.scanned:
		case <-d.done:
			return 0, fmt.Errorf("splatd exited before scan %d: %v", n, d.waitErr)
		case <-end:
			return 0, fmt.Errorf("no scan %d within %s", n, timeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Adopted is the number of files the daemon logged as adopted from their
// receipts (debug level).
func (d *Daemon) Adopted() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adopted
}

// PID is the child's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Done is closed when the child has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is the child's exit error; valid after Done.
func (d *Daemon) Err() error { return d.waitErr }

// Errors returns the error-level log messages seen so far.
func (d *Daemon) Errors() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.errorLogs...)
}

// MetricsAddr waits (up to timeout) until the log names the metrics address.
func (d *Daemon) MetricsAddr(timeout time.Duration) (string, error) {
	end := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		a := d.addr
		d.mu.Unlock()
		if a != "" {
			return a, nil
		}
		select {
		case <-d.done:
			return "", fmt.Errorf("splatd exited before serving metrics: %v", d.waitErr)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(end) {
			return "", errors.New("splatd did not serve metrics in time")
		}
	}
}

// WaitReady polls /readyz every 5 ms until it answers 200 and returns the
// time since the process was started.
func (d *Daemon) WaitReady(timeout time.Duration) (time.Duration, error) {
	addr, err := d.MetricsAddr(timeout)
	if err != nil {
		return 0, err
	}
	cl := &http.Client{Timeout: time.Second}
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		resp, err := cl.Get("http://" + addr + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(d.Started), nil
			}
		}
		select {
		case <-d.done:
			return 0, fmt.Errorf("splatd exited before it was ready: %v", d.waitErr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return 0, errors.New("splatd not ready in time")
}

// Metrics scrapes /metrics and returns the samples by name with labels,
// e.g. "splatd_upload_duration_seconds_sum" or
// `splatd_api_requests_total{code="200",route="publish"}`.
func (d *Daemon) Metrics() (map[string]float64, error) {
	addr, err := d.MetricsAddr(time.Second)
	if err != nil {
		return nil, err
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// VmHWM returns the child's peak resident set size in bytes, from
// /proc/PID/status.
func (d *Daemon) VmHWM() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// RssSplit returns the child's resident memory now as its anonymous part
// (the heap) and its file-backed part (bbolt's mmap, the binary), in bytes.
func (d *Daemon) RssSplit() (anon, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID()))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		for key, v := range map[string]*int64{"RssAnon:": &anon, "RssFile:": &file} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				if f := strings.Fields(rest); len(f) == 2 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					*v = kb << 10
				}
			}
		}
	}
	return anon, file, nil
}

// RssOf is the resident size of each file the daemon has mapped (its
// binary, splatd.db), from /proc/PID/smaps; anonymous mappings are left out.
func (d *Daemon) RssOf() (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", d.PID()))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var file string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			file = ""
			if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
				file = f[5]
			}
		case len(f) == 3 && f[0] == "Rss:" && file != "":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			out[file] += kb << 10
		}
	}
	return out, nil
}

// Kill sends SIGKILL and waits for the exit.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// Stop sends SIGTERM and waits up to timeout for a clean exit, then kills.
// It returns the exit error (nil for exit code 0).
func (d *Daemon) Stop(timeout time.Duration) error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return d.waitErr
	case <-time.After(timeout):
		d.Kill()
		return fmt.Errorf("splatd did not stop within %s after SIGTERM; killed", timeout)
	}
}

// KilledBySIGKILL reports whether the exit error is a death by SIGKILL.
func KilledBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Splatd runs a one-shot splatd command (jobs, retry) and returns stdout.
func Splatd(ctx context.Context, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("splatd %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

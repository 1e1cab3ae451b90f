package uploader

import (
	"context"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
)

// stageObserver records the pool's hooks of the after-action stage and of
// configuration errors.
type stageObserver struct {
	NopObserver
	mu     sync.Mutex
	after  map[string]int
	config map[string]bool
}

func (o *stageObserver) AfterActionError(action string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.after == nil {
		o.after = map[string]int{}
	}
	o.after[action]++
}
func (o *stageObserver) ConfigError(kind string, active bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.config == nil {
		o.config = map[string]bool{}
	}
	o.config[kind] = active
}
func (o *stageObserver) afterCount(action string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.after[action]
}
func (o *stageObserver) configActive(kind string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.config[kind]
}

// moveError is what after.ActionError looks like to the pool.
type moveError struct{}

func (moveError) Error() string       { return "move: permission denied" }
func (moveError) AfterAction() string { return "move" }

// TestPoolAfterActionStage: a failing after-action is recorded on the job
// (splatd jobs shows it), counted by action, reported by AfterErrors
// (/readyz degraded) and retried on its own backoff while the pool runs;
// once it succeeds the job is finalized and the report clears. Before
// issue 15 it was a log line, retried only at the next start.
func TestPoolAfterActionStage(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	p := e.writePLY("ro1.ply", 40)
	e.enqueue(p)
	var broken atomic.Bool
	broken.Store(true)
	var calls atomic.Int32
	obs := &stageObserver{}
	o := e.options(1)
	o.Observer = obs
	o.Timing.Patience[state.ProfileAfter] = state.Patience{Backoff: state.Backoff{Base: 2 * time.Millisecond, Cap: 10 * time.Millisecond, Jitter: state.NoJitter}}
	o.After = finishFunc(func(context.Context, state.Job) error {
		calls.Add(1)
		if broken.Load() {
			return moveError{}
		}
		return nil
	})
	pool := runPool(t, o)

	e.waitFor("the after-action to fail three times without a restart", func() bool {
		j, _ := e.store.Get(1)
		return j.AfterAttempts >= 3
	})
	j, _ := e.store.Get(1)
	if j.Stage != state.Done || j.Finalized || j.AfterAction != "move" || !strings.Contains(j.AfterError, "permission denied") || j.AfterRetry.IsZero() {
		t.Errorf("job while its move fails: %+v", j)
	}
	if err := pool.AfterErrors(); err == nil || !strings.Contains(err.Error(), "job 1 move: move: permission denied") {
		t.Errorf("AfterErrors = %v", err)
	}
	if n := obs.afterCount("move"); n < 3 {
		t.Errorf("after_action_errors_total{action=move} = %d, want >= 3", n)
	}

	broken.Store(false) // the operator fixed the folder's permissions
	e.waitFor("the job to be finalized and the report to clear", func() bool {
		j, _ := e.store.Get(1)
		return j.Finalized && pool.AfterErrors() == nil
	})
	if j, _ := e.store.Get(1); j.AfterError != "" {
		t.Errorf("the after error stayed on the job: %+v", j)
	}
	if st := e.sim.Stats(); st.Publishes != 1 {
		t.Errorf("%d publishes, want 1", st.Publishes)
	}
}

// forwarder is a TCP proxy on loopback whose target can be switched: the
// API's address first leads to a server whose certificate the client does
// not trust, later to the simulator.
type forwarder struct {
	ln     net.Listener
	target atomic.Value // host:port
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	f.target.Store(target)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", f.target.Load().(string))
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return f
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestPoolConfigErrorPausesAndResumes: a certificate that does not verify
// is a configuration error, not a transient one: the job is neither failed
// nor charged an attempt, it shows why it waits, the pool reports the kind
// (for /readyz and the splatd_config_error gauge) and pauses, and work
// resumes by itself once the certificate verifies. Before issue 15 it was
// retried for ever while everything looked healthy.
func TestPoolConfigErrorPausesAndResumes(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	fw := newForwarder(t, hostOf(t, untrusted.URL))
	c, err := api.NewClient(api.ClientOptions{BaseURL: "https://" + fw.ln.Addr().String(), Token: e.sim.Token(),
		RootCAs: e.sim.CertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := e.writePLY("scan.ply", 40)
	e.enqueue(p)
	obs := &stageObserver{}
	o := e.options(2)
	o.Client, o.Observer = c, obs
	o.Timing.Patience[state.ProfileConfig] = state.Patience{Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, Jitter: state.NoJitter}}
	pool := runPool(t, o)

	e.waitFor("the job to show the configuration error", func() bool {
		j, _ := e.store.Get(1)
		return strings.Contains(j.LastError, "configuration error (tls)")
	})
	if err, kind, since := pool.ConfigError(); err == nil || kind != state.ConfigTLS || since.IsZero() {
		t.Errorf("ConfigError = %v, %q, %v", err, kind, since)
	}
	if !obs.configActive(state.ConfigTLS) {
		t.Error("splatd_config_error{kind=tls} not set")
	}
	if j, _ := e.store.Get(1); j.Stage != state.Ready || j.Attempts != 0 {
		t.Errorf("job during the configuration error: %s, %d attempts (want ready, 0)", j.Stage, j.Attempts)
	}

	fw.target.Store(hostOf(t, e.sim.URL())) // the operator set api.ca_file right
	e.waitFor("the job to be done", func() bool { return e.unfinished() == 0 })
	if err, _, _ := pool.ConfigError(); err != nil {
		t.Errorf("ConfigError after it cleared = %v", err)
	}
	if obs.configActive(state.ConfigTLS) {
		t.Error("splatd_config_error{kind=tls} still set")
	}
	if j, _ := e.store.Get(1); j.Stage != state.Done {
		t.Errorf("job: %s (%s)", j.Stage, j.LastError)
	}
}

// TestWorkerIncompleteTimeout: a file that is still incomplete
// incomplete_timeout after it last changed fails with its reason instead
// of staying queued for ever.
func TestWorkerIncompleteTimeout(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	full := e.writePLY("truncated.ply", 60)
	data, _ := os.ReadFile(full)
	if err := os.WriteFile(full, data[:len(data)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(full, old, old); err != nil {
		t.Fatal(err)
	}
	e.enqueue(full)
	if err := e.run(e.options(1)); err != nil {
		t.Fatal(err)
	}
	j, _ := e.store.Get(1)
	if j.Stage != state.Failed || !strings.HasPrefix(j.FailReason, "file still incomplete after 1h: ") {
		t.Errorf("job %s, reason %q; want failed, file still incomplete after 1h: …", j.Stage, j.FailReason)
	}
	if st := e.sim.Stats(); st.SignedURLs != 0 {
		t.Errorf("%d signed URLs for an incomplete file", st.SignedURLs)
	}
}

// TestPoolConfigChangedRetriesAtOnce: a job waiting on a configuration
// error (a CA the client does not trust) is tried again as soon as the
// configuration changes (new roots and ConfigChanged), not at the pause's
// next step, an hour away here.
func TestPoolConfigChangedRetriesAtOnce(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	c, err := api.NewClient(api.ClientOptions{BaseURL: e.sim.URL(), Token: e.sim.Token(), RootCAs: x509.NewCertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.enqueue(e.writePLY("scan.ply", 40))
	o := e.options(1)
	o.Client = c
	o.Timing.Patience[state.ProfileConfig] = state.Patience{Backoff: state.Backoff{Base: time.Hour, Cap: time.Hour, Jitter: state.NoJitter}}
	pool := runPool(t, o)
	e.waitFor("the job to show the configuration error", func() bool {
		j, _ := e.store.Get(1)
		return strings.Contains(j.LastError, "configuration error (tls)")
	})
	c.SetRootCAs(e.sim.CertPool()) // the operator fixed api.ca_file
	pool.ConfigChanged()
	e.waitFor("the job to be done", func() bool { return e.unfinished() == 0 })
	if j, _ := e.store.Get(1); j.Stage != state.Done {
		t.Errorf("job: %s (%s)", j.Stage, j.LastError)
	}
}

// TestPoolProbesTokenAtStart: with ProbeAPI set, a refused token pauses
// the pool as it starts, with no job to run.
func TestPoolProbesTokenAtStart(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	c, err := api.NewClient(api.ClientOptions{BaseURL: e.sim.URL(), Token: "wrong-token", RootCAs: e.sim.CertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o := e.options(1)
	o.Client, o.Timing.ProbeAPI = c, time.Hour
	pool := runPool(t, o)
	e.waitFor("the pool to pause on the token", func() bool { return pool.Paused() != nil })
}

package health

import (
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// Config is the configuration pause: an error no retry can fix (the retry
// rule's WaitConfig: TLS, DNS, a host refusing for too long) pauses every
// worker, shows through Err, and is retried on the config-pause patience
// until a network step succeeds again.
type Config struct {
	e       Env
	observe func(kind string, active bool) // the Observer's ConfigError

	mu    sync.Mutex
	err   error // the last configuration error, until a network step succeeds
	kind  string
	since time.Time
	n     int           // pauses in a row
	until chan struct{} // non-nil while paused; closed when the pause ends
}

// NewConfig builds the configuration pause; observe is told each kind of
// error that begins or ends.
func NewConfig(e Env, observe func(kind string, active bool)) *Config {
	return &Config{e: e, observe: observe}
}

// Pause records a WaitConfig decision and pauses every worker for the next
// ConfigPause step; when it ends the workers try again by themselves (the
// real work is the probe: a TLS error on the storage host is seen only
// there).
func (c *Config) Pause(d state.Decision, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil || c.kind != d.Kind {
		if c.err == nil {
			c.since = c.e.Now()
		} else {
			c.observe(c.kind, false)
		}
		c.observe(d.Kind, true)
		c.e.Log.Error().Str("kind", d.Kind).Err(err).Msg("configuration error no retry can fix: all work is paused and tried again with backoff; " + advice(d.Kind))
	}
	c.err, c.kind = err, d.Kind
	if c.until != nil {
		return
	}
	c.n++
	delay := c.e.Policy.ConfigPause(c.n)
	ch := make(chan struct{})
	c.until = ch
	time.AfterFunc(delay, func() {
		c.mu.Lock()
		if c.until == ch { // not ended early by Changed
			close(ch)
			c.until = nil
		}
		c.mu.Unlock()
		c.e.Wake()
	})
}

// Changed ends a pause now (what it may wait on changed: a new
// api.ca_file, a new token) and wakes the workers.
func (c *Config) Changed() {
	c.mu.Lock()
	if c.until != nil {
		close(c.until)
		c.until = nil
		c.e.Log.Info().Str("kind", c.kind).Msg("configuration changed: trying the paused work again now")
	}
	c.mu.Unlock()
	c.e.Wake()
}

// Until returns a channel closed when the pause ends, or nil when there is
// none.
func (c *Config) Until() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		return nil
	}
	return c.until
}

// Worked ends the configuration error once a step from stage from, one
// that talks to the API or storage, succeeded.
func (c *Config) Worked(from state.Stage) {
	switch from {
	case state.Ready, state.Signed, state.Publishing, state.Processing:
	default:
		return // no network in this step: it proves nothing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return
	}
	c.observe(c.kind, false)
	c.e.Log.Info().Str("kind", c.kind).Float64("after_s", c.e.Now().Sub(c.since).Seconds()).Msg("the configuration error cleared: work resumed")
	c.err, c.kind, c.n = nil, "", 0
}

// Err returns the configuration error that pauses the workers, its kind
// (state.ConfigTLS, ConfigDNS, ConfigRefused) and since when; err is nil
// when there is none.
func (c *Config) Err() (err error, kind string, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err, c.kind, c.since
}

func advice(kind string) string {
	switch kind {
	case state.ConfigTLS:
		return "the server's certificate does not verify: set api.ca_file to the CA that signed it (a proxy's, a private CA's), or fix the certificate"
	case state.ConfigDNS:
		return "the host name does not resolve: check api.base_url and the machine's DNS"
	case state.ConfigRefused:
		return "the host keeps refusing connections: check api.base_url's port and that the service (or a proxy) runs"
	}
	return "check the configuration"
}

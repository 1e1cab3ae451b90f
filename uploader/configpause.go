package uploader

import (
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// A configuration error (the retry rule's WaitConfig: TLS, DNS, a host
// refusing for too long) must never look healthy while work waits: it pauses
// every worker, shows on the waiting job and through ConfigError, and is
// retried on the config-pause patience until it clears by itself.

// configState is the configuration error pause.
type configState struct {
	mu    sync.Mutex
	err   error // the last configuration error, until a network step succeeds
	kind  string
	since time.Time
	n     int           // pauses in a row
	until chan struct{} // non-nil while paused; closed when the pause ends
}

// pauseConfig records a WaitConfig decision and pauses every worker for the
// next ConfigPause step; when it ends the workers try again by themselves
// (the real work is the probe: a TLS error on the storage host is seen only
// there).
func (p *Pool) pauseConfig(d state.Decision, err error) {
	c := &p.cfg
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil || c.kind != d.Kind {
		if c.err == nil {
			c.since = p.o.Now()
		} else {
			p.o.Observer.ConfigError(c.kind, false)
		}
		p.o.Observer.ConfigError(d.Kind, true)
		p.log.Error().Str("kind", d.Kind).Err(err).Msg("configuration error no retry can fix: all work is paused and tried again with backoff; " + configAdvice(d.Kind))
	}
	c.err, c.kind = err, d.Kind
	if c.until != nil {
		return
	}
	c.n++
	delay := p.policy.ConfigPause(c.n)
	ch := make(chan struct{})
	c.until = ch
	time.AfterFunc(delay, func() {
		c.mu.Lock()
		if c.until == ch { // not ended early by ConfigChanged
			close(ch)
			c.until = nil
		}
		c.mu.Unlock()
		p.Wake()
	})
}

// ConfigChanged says that what a pause may wait on changed (a new
// api.ca_file, a new token): a configuration pause ends now, the token
// prober probes now, and the waiting jobs are tried again at once rather
// than at the pause's next step.
func (p *Pool) ConfigChanged() {
	c := &p.cfg
	c.mu.Lock()
	if c.until != nil {
		close(c.until)
		c.until = nil
		p.log.Info().Str("kind", c.kind).Msg("configuration changed: trying the paused work again now")
	}
	c.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	p.Wake()
}

// configPausedChan returns a channel closed when the configuration pause
// ends, or nil when there is none.
func (p *Pool) configPausedChan() <-chan struct{} {
	p.cfg.mu.Lock()
	defer p.cfg.mu.Unlock()
	if p.cfg.until == nil {
		return nil
	}
	return p.cfg.until
}

// configCleared ends the configuration error once a step that talks to the
// API or storage succeeded.
func (p *Pool) configCleared(from state.Stage) {
	switch from {
	case state.Ready, state.Signed, state.Publishing, state.Processing:
	default:
		return // no network in this step: it proves nothing
	}
	c := &p.cfg
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return
	}
	p.o.Observer.ConfigError(c.kind, false)
	p.log.Info().Str("kind", c.kind).Float64("after_s", p.o.Now().Sub(c.since).Seconds()).Msg("the configuration error cleared: work resumed")
	c.err, c.kind, c.n = nil, "", 0
}

// ConfigError returns the configuration error that pauses the workers, its
// kind (state.ConfigTLS, ConfigDNS, ConfigRefused) and since when; err is
// nil when there is none.
func (p *Pool) ConfigError() (err error, kind string, since time.Time) {
	p.cfg.mu.Lock()
	defer p.cfg.mu.Unlock()
	return p.cfg.err, p.cfg.kind, p.cfg.since
}

func configAdvice(kind string) string {
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

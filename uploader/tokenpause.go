package uploader

import (
	"context"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// The token pause: a 401 from the API pauses every worker (retrying each
// job would only burn the rate limit), and one prober tries the token on
// the token prober's patience until the API accepts it again.

// pause records a 401; the prober clears it.
func (p *Pool) pause(err error) {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	if p.authErr == nil {
		close(p.authChanged)
		p.authChanged = make(chan struct{})
	}
	p.authErr = err
}

// pausedChan returns a channel closed when the pause ends, or nil.
func (p *Pool) pausedChan() <-chan struct{} {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	if p.authErr == nil {
		return p.configPausedChan()
	}
	return p.authChanged
}

// authProber waits for a pause, then probes the token with one request per
// step of the token prober's patience (30 s doubling to 5 min) and resumes the workers as soon as
// the API accepts it again. While paused it re-reads the token source every
// TokenRecheck: a token file fixed by the operator is tried at once, with
// no restart. Jobs are neither failed nor charged an attempt meanwhile.
func (p *Pool) authProber(ctx context.Context) error {
	tokens := p.o.Client.Token()
	var recheck <-chan time.Time
	if p.o.Timing.ProbeAPI > 0 {
		p.probeAtStart(ctx)
		t := time.NewTicker(p.o.Timing.ProbeAPI)
		defer t.Stop()
		recheck = t.C
	}
	for {
		p.authMu.Lock()
		paused, ch := p.authErr != nil, p.authChanged
		p.authMu.Unlock()
		if !paused {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			case <-recheck:
				if err, _ := p.o.Client.Unreachable(); err != nil {
					p.probeOnce(ctx) // an idle pool learns that the API is back
				}
			}
			continue
		}
		p.log.Error().Str("token_from", tokens.Origin()).Err(p.Paused()).
			Msg("the API refuses the token: all work is paused and the token is probed with backoff; " + tokens.Advice())
		for attempt := 1; ; attempt++ {
			if err := p.awaitProbe(ctx, tokens, attempt); err != nil {
				return err
			}
			err := p.probe(ctx)
			if err == nil || p.policy.DecideAs(state.ProfileToken, ctx, err, attempt, p.o.Now()).Action != state.PauseToken {
				p.authMu.Lock()
				p.authErr = nil
				close(p.authChanged)
				p.authChanged = make(chan struct{})
				p.authMu.Unlock()
				p.log.Info().Int("probes", attempt).Msg("API accepts the token again: resuming")
				p.Wake()
				break
			}
			p.pause(err)
			p.log.Warn().Int("probe", attempt).Str("token_from", tokens.Origin()).Err(err).Msg("API still refuses the token")
		}
	}
}

// probeAtStart probes the token once as the pool starts, so that a wrong
// token is reported (and pauses the pool) at once, idle or not.
func (p *Pool) probeAtStart(ctx context.Context) {
	err := p.probeOnce(ctx)
	if err == nil {
		p.log.Info().Str("token_from", p.o.Client.Token().Origin()).Msg("the API accepts the token")
	} else if p.Paused() == nil {
		p.log.Warn().Err(err).Msg("the API did not answer the token probe at start; work is tried with backoff")
	}
}

// probeOnce probes the token and pauses the pool when the API refuses it.
func (p *Pool) probeOnce(ctx context.Context) error {
	err := p.probe(ctx)
	if err != nil && ctx.Err() == nil && p.policy.DecideAs(state.ProfileToken, ctx, err, 1, p.o.Now()).Action == state.PauseToken {
		p.log.Warn().Str("step", "token probe").Err(err).Msg("API refused the token: pausing all workers")
		p.pause(err)
	}
	return err
}

// probe asks the API whether it accepts the token, with the configured
// protocol's cheapest authenticated call (nothing is uploaded).
func (p *Pool) probe(ctx context.Context) error {
	if p.o.Protocol == ProtocolV1 {
		_, err := p.o.Client.Me(ctx)
		return err
	}
	_, err := p.o.Client.SignedURL(ctx, "splatd-token-probe.ply")
	return err
}

// awaitProbe waits for the next probe: the attempt's backoff step, or
// sooner when the token source changed.
func (p *Pool) awaitProbe(ctx context.Context, tokens *api.Token, attempt int) error {
	t := time.NewTimer(p.policy.Wait(state.ProfileToken, attempt))
	defer t.Stop()
	recheck := time.NewTicker(p.o.Timing.TokenRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-p.kick:
			return nil
		case <-recheck.C:
			changed, err := tokens.Reload()
			if err != nil {
				p.log.Error().Err(err).Str("token_from", tokens.Origin()).Msg("the new token is unusable")
			}
			if changed {
				p.log.Info().Str("token_from", tokens.Origin()).Msg("token changed: trying it now")
				return nil
			}
		}
	}
}

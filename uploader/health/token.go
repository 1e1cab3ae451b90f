package health

import (
	"context"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// API is what the token prober asks of the API client (*api.Client).
type API interface {
	Token() *api.Token
	Me(ctx context.Context) (api.Me, error)
	SignedURL(ctx context.Context, fileName string) (api.Upload, error)
	Unreachable() (err error, since time.Time)
}

// Token is the token pause: a 401 from the API pauses every worker
// (retrying each job would only burn the rate limit), and one prober (Run)
// tries the token on the token prober's patience until the API accepts it.
type Token struct {
	e            Env
	api          API
	v1           bool          // probe with the v1 protocol's call
	probeAPI     time.Duration // Timing.ProbeAPI: probe at start and while unreachable; zero: never
	tokenRecheck time.Duration // Timing.TokenRecheck

	mu      sync.Mutex
	err     error         // non-nil while the token is refused
	changed chan struct{} // closed and replaced when err changes
	kick    chan struct{} // ProbeNow: the prober probes now
}

// NewToken builds the token pause of a pool whose client is c; v1 says the
// pool publishes with the v1 protocol.
func NewToken(e Env, c API, v1 bool, probeAPI, tokenRecheck time.Duration) *Token {
	return &Token{e: e, api: c, v1: v1, probeAPI: probeAPI, tokenRecheck: tokenRecheck,
		changed: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// Pause records a 401; the prober clears it.
func (t *Token) Pause(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		close(t.changed)
		t.changed = make(chan struct{})
	}
	t.err = err
}

// Err returns the 401 error while the API refuses the token, nil otherwise.
func (t *Token) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Until returns a channel closed when the pause ends, or nil.
func (t *Token) Until() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		return nil
	}
	return t.changed
}

// ProbeNow makes a prober waiting for its next probe probe at once.
func (t *Token) ProbeNow() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Run waits for a pause, then probes the token with one request per step
// of the token prober's patience (30 s doubling to 5 min) and resumes the
// workers as soon as the API accepts it again. While paused it re-reads the
// token source every TokenRecheck: a token file fixed by the operator is
// tried at once, with no restart. Jobs are neither failed nor charged an
// attempt meanwhile.
func (t *Token) Run(ctx context.Context) error {
	tokens := t.api.Token()
	var recheck <-chan time.Time
	if t.probeAPI > 0 {
		t.probeAtStart(ctx)
		tk := time.NewTicker(t.probeAPI)
		defer tk.Stop()
		recheck = tk.C
	}
	for {
		t.mu.Lock()
		paused, ch := t.err != nil, t.changed
		t.mu.Unlock()
		if !paused {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			case <-recheck:
				if err, _ := t.api.Unreachable(); err != nil {
					t.probeOnce(ctx) // an idle pool learns that the API is back
				}
			}
			continue
		}
		t.e.Log.Error().Str("token_from", tokens.Origin()).Err(t.Err()).
			Msg("the API refuses the token: all work is paused and the token is probed with backoff; " + tokens.Advice())
		for attempt := 1; ; attempt++ {
			if err := t.awaitProbe(ctx, tokens, attempt); err != nil {
				return err
			}
			err := t.probe(ctx)
			if err == nil || t.e.Policy.DecideAs(state.ProfileToken, ctx, err, attempt, t.e.Now()).Action != state.PauseToken {
				t.mu.Lock()
				t.err = nil
				close(t.changed)
				t.changed = make(chan struct{})
				t.mu.Unlock()
				t.e.Log.Info().Int("probes", attempt).Msg("API accepts the token again: resuming")
				t.e.Wake()
				break
			}
			t.Pause(err)
			t.e.Log.Warn().Int("probe", attempt).Str("token_from", tokens.Origin()).Err(err).Msg("API still refuses the token")
		}
	}
}

// probeAtStart probes the token once as the pool starts, so that a wrong
// token is reported (and pauses the pool) at once, idle or not.
func (t *Token) probeAtStart(ctx context.Context) {
	err := t.probeOnce(ctx)
	if err == nil {
		t.e.Log.Info().Str("token_from", t.api.Token().Origin()).Msg("the API accepts the token")
	} else if t.Err() == nil {
		t.e.Log.Warn().Err(err).Msg("the API did not answer the token probe at start; work is tried with backoff")
	}
}

// probeOnce probes the token and pauses the pool when the API refuses it.
func (t *Token) probeOnce(ctx context.Context) error {
	err := t.probe(ctx)
	if err != nil && ctx.Err() == nil && t.e.Policy.DecideAs(state.ProfileToken, ctx, err, 1, t.e.Now()).Action == state.PauseToken {
		t.e.Log.Warn().Str("step", "token probe").Err(err).Msg("API refused the token: pausing all workers")
		t.Pause(err)
	}
	return err
}

// probe asks the API whether it accepts the token, with the protocol's
// cheapest authenticated call (nothing is uploaded).
func (t *Token) probe(ctx context.Context) error {
	if t.v1 {
		_, err := t.api.Me(ctx)
		return err
	}
	_, err := t.api.SignedURL(ctx, "splatd-token-probe.ply")
	return err
}

// awaitProbe waits for the next probe: the attempt's backoff step, or
// sooner when the token source changed or ProbeNow was called.
func (t *Token) awaitProbe(ctx context.Context, tokens *api.Token, attempt int) error {
	tm := time.NewTimer(t.e.Policy.Wait(state.ProfileToken, attempt))
	defer tm.Stop()
	recheck := time.NewTicker(t.tokenRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
			return nil
		case <-t.kick:
			return nil
		case <-recheck.C:
			changed, err := tokens.Reload()
			if err != nil {
				t.e.Log.Error().Err(err).Str("token_from", tokens.Origin()).Msg("the new token is unusable")
			}
			if changed {
				t.e.Log.Info().Str("token_from", tokens.Origin()).Msg("token changed: trying it now")
				return nil
			}
		}
	}
}

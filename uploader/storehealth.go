package uploader

import (
	"context"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// storeHealth is the pool's one view of its job store while it fails (a
// full disk, an I/O error): one failure count paces every worker with the
// store patience, and it starts over only once the store has not failed
// for that patience's cap (docs/architecture.md, "The uploader core").
type storeHealth struct {
	mu        sync.Mutex
	err       error     // the open episode's last failure; nil while the store works
	wrote     bool      // a write failed in the open episode: only a committed job ends it
	fails     int       // the store patience's attempt number
	recovered time.Time // when the last episode ended
}

// storeTrouble records a store failure, logs it and waits the retry rule's
// store patience before the caller tries again; false when ctx ended.
// write says the failure was of a write (a commit), not of a read (a claim).
func (p *Pool) storeTrouble(ctx context.Context, err error, write bool) bool {
	h := &p.store
	now := p.o.Now()
	h.mu.Lock()
	if h.err == nil && now.Sub(h.recovered) >= p.policy.PatienceOf(state.ProfileStore).Backoff.Cap {
		h.fails = 0 // the store worked for a while: a new trouble
	}
	h.fails++
	h.err = err
	h.wrote = h.wrote || write
	n := h.fails
	h.mu.Unlock()
	d := p.policy.Wait(state.ProfileStore, n)
	p.log.Error().Err(err).Float64("retry_in_s", d.Seconds()).Msg("job store failed; work continues when it recovers")
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// storeAnswered notes that a claim was answered. That proves reads work
// again, not writes: it ends an episode in which only claims failed, and
// leaves one in which a commit failed open.
func (p *Pool) storeAnswered() {
	p.storeWorks(false)
}

// storeAdvanced notes that a job's commit succeeded: the store works again
// (storeHealth says why the failure count survives this).
func (p *Pool) storeAdvanced() {
	p.storeWorks(true)
}

func (p *Pool) storeWorks(wrote bool) {
	h := &p.store
	h.mu.Lock()
	if h.err == nil || (h.wrote && !wrote) {
		h.mu.Unlock()
		return
	}
	h.err, h.wrote, h.recovered = nil, false, p.o.Now()
	h.mu.Unlock()
	p.log.Info().Msg("job store works again")
	p.o.Observer.StoreRecovered()
}

// StoreError returns the last store failure while the store keeps failing
// (for /readyz), nil once a job was advanced again (or, when only claims
// failed, once a claim was answered).
func (p *Pool) StoreError() error {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	return p.store.err
}

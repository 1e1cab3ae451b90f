package health

import (
	"context"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// Store is the pool's one view of its job store while it fails (a full
// disk, an I/O error): one failure count paces every worker with the store
// patience, and it starts over only once the store has not failed for that
// patience's cap (docs/architecture.md, "The uploader core").
type Store struct {
	e           Env
	onRecovered func() // the Observer's StoreRecovered

	mu        sync.Mutex
	err       error     // the open episode's last failure; nil while the store works
	wrote     bool      // a write failed in the open episode: only a committed job ends it
	fails     int       // the store patience's attempt number
	recovered time.Time // when the last episode ended
}

// NewStore builds the store's health; recovered is told each episode that
// ends.
func NewStore(e Env, recovered func()) *Store {
	return &Store{e: e, onRecovered: recovered}
}

// Failed records a store failure, logs it and waits the retry rule's store
// patience before the caller tries again; false when ctx ended. write says
// the failure was of a write (a commit), not of a read (a claim).
func (s *Store) Failed(ctx context.Context, err error, write bool) bool {
	now := s.e.Now()
	s.mu.Lock()
	if s.err == nil && now.Sub(s.recovered) >= s.e.Policy.PatienceOf(state.ProfileStore).Backoff.Cap {
		s.fails = 0 // the store worked for a while: a new trouble
	}
	s.fails++
	s.err = err
	s.wrote = s.wrote || write
	n := s.fails
	s.mu.Unlock()
	d := s.e.Policy.Wait(state.ProfileStore, n)
	s.e.Log.Error().Err(err).Float64("retry_in_s", d.Seconds()).Msg("job store failed; work continues when it recovers")
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Answered notes that a claim was answered. That proves reads work again,
// not writes: it ends an episode in which only claims failed, and leaves
// one in which a commit failed open.
func (s *Store) Answered() { s.works(false) }

// Advanced notes that a job's commit succeeded: the store works again
// (Store says why the failure count survives this).
func (s *Store) Advanced() { s.works(true) }

func (s *Store) works(wrote bool) {
	s.mu.Lock()
	if s.err == nil || (s.wrote && !wrote) {
		s.mu.Unlock()
		return
	}
	s.err, s.wrote, s.recovered = nil, false, s.e.Now()
	s.mu.Unlock()
	s.e.Log.Info().Msg("job store works again")
	s.onRecovered()
}

// Err returns the last store failure while the store keeps failing (for
// /readyz), nil once a job was advanced again (or, when only claims
// failed, once a claim was answered).
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

package queue

import (
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// releaseEvery is the least time between two releases of the mapped pages.
const releaseEvery = 50 * time.Millisecond

// releaser drops the process's mapping of the state file's pages shortly
// after transactions read them: they stay in the page cache, and the
// daemon's resident memory holds only the pages in use.
type releaser struct {
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// newReleaser releases db's mapped pages through view, a guarded read
// (guardedDB.guarded): it stops at the store's first damage.
func newReleaser(db *bolt.DB, view func(func(*bolt.Tx) error) error) *releaser {
	r := &releaser{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(db, view)
	return r
}

// touched says a transaction ran; it never blocks.
func (r *releaser) touched() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *releaser) run(db *bolt.DB, view func(func(*bolt.Tx) error) error) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		}
		// Held in a read transaction, the mapping cannot be replaced.
		err := view(func(tx *bolt.Tx) error {
			dropMapped(db.Info().Data, tx.Size())
			return nil
		})
		if err != nil {
			return
		}
		select {
		case <-r.stop:
			return
		case <-time.After(releaseEvery):
		}
	}
}

// close stops the releaser before the file is closed, waiting at most
// wait for it (a damaged file may hold bbolt's locks for good); a second
// close does nothing more.
func (r *releaser) close(wait time.Duration) {
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-time.After(wait):
	}
}

// dropWithin releases the mapped pages at the start of write transaction
// tx, whose mapping only its own commit can replace: the pages earlier
// transactions read are gone before the releaser's next pass.
func (g *guardedDB) dropWithin(tx *bolt.Tx) {
	if g.release != nil {
		dropMapped(g.DB.Info().Data, tx.Size())
	}
}

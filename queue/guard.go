package queue

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrDamaged matches the error of a state file that is damaged (a
// *DamagedError).
var ErrDamaged = errors.New("the state file is damaged")

// DamagedError is a state file that cannot be used: Check found damage in
// its pages, or bbolt panicked reading it. It names the file, what is wrong
// and the command that recovers.
type DamagedError struct {
	Path     string
	Problems []string
	More     int // problems beyond those listed
	// Command is the command that recovers, as the operator types it;
	// empty: "splatd state recover".
	Command string
	// Stack is where bbolt panicked, for the log (empty when Check found
	// the damage).
	Stack string
}

func (e *DamagedError) Error() string {
	what := strings.Join(e.Problems, "; ")
	if e.More > 0 {
		what += fmt.Sprintf("; and %d more", e.More)
	}
	return fmt.Sprintf("the state file %s is damaged: %s. Stop splatd and run `%s`: it keeps the damaged file aside (%s.damaged-TIME), salvages every job it can still read and adopts the receipts in the watch folders",
		e.Path, what, cmp.Or(e.Command, "splatd state recover"), FileName)
}

func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

func panicked(path, op, command string, p any) *DamagedError {
	return &DamagedError{Path: path, Problems: []string{fmt.Sprintf("bbolt panicked during %s (%v)", op, p)}, Command: command, Stack: string(debug.Stack())}
}

// guardedDB is the bbolt file with every transaction guarded: a panic
// inside bbolt (a damaged page) becomes a *DamagedError, and from then on
// every transaction fails with that error without reading the file again.
type guardedDB struct {
	*bolt.DB
	file      *os.File // bbolt's descriptor of the file (openBolt)
	path      string
	command   string // DamagedError.Command
	damaged   atomic.Pointer[DamagedError]
	onDamaged func(*DamagedError) // called once, on its own goroutine
	release   *releaser           // nil: pages stay mapped
}

// View is bolt.DB.View, guarded.
func (g *guardedDB) View(fn func(*bolt.Tx) error) error { return g.guard("a read", g.DB.View, fn) }

// Update is bolt.DB.Update, guarded.
func (g *guardedDB) Update(fn func(*bolt.Tx) error) error { return g.guard("a write", g.DB.Update, fn) }

func (g *guardedDB) guard(op string, run func(func(*bolt.Tx) error) error, fn func(*bolt.Tx) error) (err error) {
	if g.release != nil {
		defer g.release.touched()
	}
	return g.guarded(op, run, fn)
}

// guarded runs fn in a transaction of run, a panic in it recovered as the
// store's damage.
func (g *guardedDB) guarded(op string, run func(func(*bolt.Tx) error) error, fn func(*bolt.Tx) error) (err error) {
	if e := g.damaged.Load(); e != nil {
		return e
	}
	// A wild pointer read from a damaged page faults: with this set it
	// panics instead, and the panic is recovered below.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			e := panicked(g.path, op, g.command, p)
			if g.damaged.CompareAndSwap(nil, e) && g.onDamaged != nil {
				go g.onDamaged(e)
			}
			err = g.damaged.Load()
		}
	}()
	return run(fn)
}

// Damaged is the error that stopped the store's use (nil while it works).
func (s *Store) Damaged() error {
	if e := s.db.damaged.Load(); e != nil {
		return e
	}
	return nil
}

// Close closes the file. After a panic bbolt may hold its own lock for
// good (a panic in its rollback): then, after closeWait, the descriptor is
// closed under it, which releases the file's lock for the next process.
func (g *guardedDB) Close() error {
	if g.release != nil {
		g.release.close(closeWait)
	}
	if g.damaged.Load() == nil {
		return g.DB.Close()
	}
	done := make(chan error, 1)
	go func() { done <- g.DB.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(closeWait):
		return g.file.Close()
	}
}

// closeWait is how long Close waits for bbolt after a panic.
const closeWait = 2 * time.Second

// openBolt is bolt.Open with its panics recovered: the file descriptor
// bbolt opened is closed again (releasing its lock). f is that descriptor.
func openBolt(path, command string, bo *bolt.Options) (db *bolt.DB, f *os.File, err error) {
	bo.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, perm)
		return f, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if f != nil {
				f.Close()
			}
			db, err = nil, panicked(path, "open", command, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, bo)
	return db, f, err
}

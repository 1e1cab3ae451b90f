// Package lazyfs is a FUSE file system over a real folder that forgets, at
// a power cut, what was not made durable: file data not fsynced, and the
// folder entries (create, rename, link, unlink, mkdir) of a folder not
// fsynced since. It serves every operation from the backing folder, so the
// live view is the real one, and keeps beside it the durable state that an
// fsync makes; a cut freezes every file system of a Machine, and Apply
// rebuilds the backing folder from that durable state. bench/README.md
// says what it models and what not.
package lazyfs

import (
	"sync"
)

// Op is one operation, as the cut hook sees it before it is done.
type Op struct {
	FS   string // the file system's name
	Kind string // fsync, fsyncdir, create, mkdir, symlink, rename, link, unlink, rmdir, write, setattr
	Path string // relative to the mount root
	To   string // rename and link: the new name
	Pid  uint32 // the calling process
}

// Machine is the power domain of one or more file systems: a cut freezes
// them all at once.
type Machine struct {
	mu      sync.Mutex // also guards every FS's durable state
	hook    func(Op) bool
	frozen  bool
	cutOp   string
	cut     chan struct{}
	release chan struct{}
}

// NewMachine returns a machine with its power on and no hook.
func NewMachine() *Machine {
	return &Machine{cut: make(chan struct{}), release: make(chan struct{})}
}

// Arm sets the hook, called (with the machine's lock held) before each
// operation that changes something; its true cuts the power right there,
// before that operation. nil disarms.
func (m *Machine) Arm(hook func(Op) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = hook
}

// CutNow cuts the power now; what names the moment in CutPoint.
func (m *Machine) CutNow(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freeze(what)
}

func (m *Machine) freeze(what string) {
	if m.frozen {
		return
	}
	m.frozen, m.cutOp, m.hook = true, what, nil
	close(m.cut)
}

// Cut is closed at the cut (the next cut's after PowerOn).
func (m *Machine) Cut() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cut
}

// CutPoint names the operation or moment the power was cut at.
func (m *Machine) CutPoint() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cutOp
}

// Release lets the operations stopped at the cut return (with EIO): a
// process killed while the file system holds its request cannot exit
// before. Nothing they do is durable.
func (m *Machine) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		select {
		case <-m.release:
		default:
			close(m.release)
		}
	}
}

// PowerOn ends a cut once every file system has been applied.
func (m *Machine) PowerOn() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.frozen, m.cutOp, m.hook = false, "", nil
	m.cut, m.release = make(chan struct{}), make(chan struct{})
}

// enter is called by every operation first. A changing operation (op
// non-nil) goes through the hook. After the cut, every operation waits
// for Release and fails.
func (m *Machine) enter(op *Op) bool {
	m.mu.Lock()
	if !m.frozen && op != nil && m.hook != nil && m.hook(*op) {
		m.freeze(op.FS + ": " + op.Kind + " " + op.Path + arrow(op.To))
	}
	frozen, release := m.frozen, m.release
	m.mu.Unlock()
	if frozen {
		<-release
		return false
	}
	return true
}

func arrow(to string) string {
	if to == "" {
		return ""
	}
	return " -> " + to
}

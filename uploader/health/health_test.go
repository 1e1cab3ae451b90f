package health

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// lines is a log that tells each line to a channel when asked.
type lines struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan string // each message, when non-nil
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen != nil {
		l.seen <- string(b)
	}
	return l.buf.Write(b)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *lines) count(msg string) int { return strings.Count(l.String(), msg) }

// testEnv is an Env with a clock the test moves, a log it reads and a
// count of the wakes.
type testEnv struct {
	Env
	log   *lines
	skew  atomic.Int64
	wakes atomic.Int32
	woken chan struct{}
}

func newTestEnv(p state.Policy) *testEnv {
	e := &testEnv{log: &lines{}, woken: make(chan struct{}, 100)}
	e.Env = Env{Log: zerolog.New(e.log), Policy: p,
		Now:  func() time.Time { return time.Unix(1e9, 0).Add(time.Duration(e.skew.Load())) },
		Wake: func() { e.wakes.Add(1); e.woken <- struct{}{} }}
	return e
}

// patience is a policy whose profile pr waits base doubling to limit.
func patience(pr state.Profile, base, limit time.Duration) state.Policy {
	return state.Policy{}.With(pr, state.Backoff{Base: base, Cap: limit, Jitter: state.NoJitter})
}

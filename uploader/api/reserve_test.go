package api

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/splatd/splatd/uploader/pace"
)

// syncBuffer is a log sink goroutines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// countingPacer admits everything and records the calls and releases.
type countingPacer struct {
	mu       sync.Mutex
	waits    []string
	released []*pace.Answer
}

func (p *countingPacer) Wait(_ context.Context, route string, read bool) (func(*pace.Answer), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if read {
		route += " (read)"
	}
	p.waits = append(p.waits, route)
	return func(resp *pace.Answer) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.released = append(p.released, resp)
	}, nil
}

// TestReservationCancelledIsNotSent: a slot reserved and given back unused
// (the file changed, a shutdown) is released as pace.NotSent, which costs the
// window nothing; cancelling twice releases once.
func TestReservationCancelledIsNotSent(t *testing.T) {
	t.Parallel()
	p := &countingPacer{}
	c := &Client{pacer: p, obs: NopObserver{}, now: time.Now}
	r, err := c.Reserve(context.Background(), RoutePublish)
	if err != nil {
		t.Fatal(err)
	}
	r.Cancel()
	r.Cancel()
	if _, ok := reserved(WithReservation(context.Background(), r), RoutePublish); ok {
		t.Error("a cancelled reservation was handed to a call")
	}
	if len(p.waits) != 1 || p.waits[0] != RoutePublish || len(p.released) != 1 || p.released[0] != pace.NotSent {
		t.Errorf("waits %v, released %v; want one publish wait released NotSent", p.waits, p.released)
	}
}

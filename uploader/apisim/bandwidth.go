package apisim

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// The bandwidth cap paces the request-body bytes storage reads on each TCP
// connection to StorageBandwidth bytes per second, over the connection's
// whole life (keep-alive requests share its account), as S3 throttles each
// stream. Parallel part PUTs on several connections therefore add up, and a
// single stream does not.

const (
	// paceChunk bounds one read while the cap is on, so that pacing is
	// smooth rather than a 1 MiB burst and a long pause.
	paceChunk = 16 << 10
	// minPace is the smallest pause worth a timer; smaller debts are paid
	// with the next read's.
	minPace = 2 * time.Millisecond
	// idleGap is how late a read may come after the schedule and still
	// count as the same busy period (timer overshoot is credited); a longer
	// gap starts a new period, so idling saves no credit for a burst.
	idleGap = 50 * time.Millisecond
)

// SetStorageBandwidth changes the per-connection cap (bytes per second;
// 0 removes it). It applies from each connection's next read.
func (s *Server) SetStorageBandwidth(bytesPerSecond int64) {
	s.bandwidth.Store(max(bytesPerSecond, 0))
}

// storageConn is one storage connection's account.
type storageConn struct {
	id int64

	mu    sync.Mutex
	start time.Time // start of the current busy period
	bytes int64     // bytes read since start
	clock time.Time // the connection's own view of now, moved by its waits
}

type connKey struct{}

func (s *Server) storageConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &storageConn{id: s.connSeq.Add(1)})
}

// pace accounts n bytes just read and waits until the schedule allows
// them; it returns the wait. The connection's clock is never behind its
// last wait, so with a fake Now and a no-op Sleep the waits still add up to
// bytes/rate: the cap can be measured without wall-clock time.
func (c *storageConn) pace(ctx context.Context, n int, rate int64, now func() time.Time, sleep func(context.Context, time.Duration) error) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rate <= 0 {
		c.start = time.Time{}
		return 0, nil
	}
	t := now()
	if t.Before(c.clock) {
		t = c.clock
	}
	if c.start.IsZero() || t.Sub(c.start.Add(byteTime(c.bytes, rate))) > idleGap {
		c.start, c.bytes = t, 0
	}
	c.bytes += int64(n)
	wait := c.start.Add(byteTime(c.bytes, rate)).Sub(t)
	if wait < minPace {
		return 0, nil
	}
	c.clock = t.Add(wait)
	return wait, sleep(ctx, wait)
}

// byteTime is how long n bytes take at rate bytes per second.
func byteTime(n, rate int64) time.Duration {
	return time.Duration(float64(n) / float64(rate) * float64(time.Second))
}

// pacedBody is a storage request body read under its connection's cap. It
// also counts what was read, for Stats.Sessions.
type pacedBody struct {
	io.ReadCloser
	ctx     context.Context
	s       *Server
	conn    *storageConn // nil if the request came without one (Handler used alone)
	read    int64
	waited  time.Duration
	session string // v1 upload id, once the URL named one
}

func (b *pacedBody) Read(p []byte) (int, error) {
	rate := b.s.bandwidth.Load()
	if rate > 0 && len(p) > paceChunk {
		p = p[:paceChunk]
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.read == 0 {
		b.s.noteFirstByte()
	}
	b.read += int64(n)
	if n > 0 && b.conn != nil {
		wait, perr := b.conn.pace(b.ctx, n, rate, b.s.now, b.s.o.Sleep)
		b.waited += wait
		if perr != nil && err == nil {
			err = perr
		}
	}
	return n, err
}

// noteFirstByte stamps Stats.FirstBodyByte the first time storage reads a
// body byte, as it happens (the per-request counters add up only when a
// request ends).
func (s *Server) noteFirstByte() {
	s.mu.Lock()
	if s.stats.FirstBodyByte.IsZero() {
		s.stats.FirstBodyByte = s.now()
	}
	s.mu.Unlock()
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package meter

import (
	"io"
	"sync/atomic"
	"time"
)

// Check counts the bytes of one pass of a job's check as an io.Writer
// beside that pass (trustfs.HashTo, a bundle's io.MultiWriter, an
// io.TeeReader of the encoder's input): no second read. Each Write adds to
// an atomic counter, which Board.Checks reads; the board's lock is taken
// at most once per rateSample, for the rate's samples. Writes come from the
// one goroutine of the pass.
type Check struct {
	b    *Board
	id   uint64
	pr   Progress
	done atomic.Int64
	next time.Time // of the next sample
	hook func() error
}

// StartCheck shows job id's check of path doing step over size bytes until
// the returned Check stops. hook, when set, runs after each chunk is
// counted and its error ends the Write.
func (b *Board) StartCheck(id uint64, path, step string, size int64, hook func() error) *Check {
	c := &Check{b: b, id: id, pr: Progress{Path: path, Step: step, Size: size}, hook: hook}
	c.next = b.now().Add(rateSample)
	b.set(b.checks, id, &c.pr, &c.done)
	return c
}

func (c *Check) Write(p []byte) (int, error) {
	done := c.done.Add(int64(len(p)))
	if now := c.b.now(); !now.Before(c.next) {
		c.next = now.Add(rateSample)
		pr := c.pr
		pr.Sent = done
		c.b.set(c.b.checks, c.id, &pr, &c.done)
	}
	if c.hook != nil {
		if err := c.hook(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

var _ io.Writer = (*Check)(nil)

// Encoded is sog.Options.Progress for the check: the bytes of the PLY's
// passes read so far, over their total.
func (c *Check) Encoded(done, total int64) {
	c.pr.Size = total
	c.done.Store(done)
	if now := c.b.now(); !now.Before(c.next) || done == total {
		c.next = now.Add(rateSample)
		pr := c.pr
		pr.Sent = done
		c.b.set(c.b.checks, c.id, &pr, &c.done)
	}
}

// Stop ends the check's entry.
func (c *Check) Stop() { c.b.set(c.b.checks, c.id, nil, nil) }

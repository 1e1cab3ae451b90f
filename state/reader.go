package state

import (
	"context"
	"io"
)

// ContextReader reads r while ctx lasts: each Read first checks ctx, so a
// long copy (a bundle built, a file encoded) ends within one read of a
// shutdown.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

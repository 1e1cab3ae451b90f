package sog

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveAVX2 chooses the assembly kernel (dist.go says why its floats are
// the Go code's).
var haveAVX2 = cpu.X86.HasAVX2

// sqDistsAVX2 is sqDists over k rows of d floats: out[c] is the squared
// distance of p to rows[c*d:(c+1)*d]; mask is tailMasks[d%8].
//
//go:noescape
func sqDistsAVX2(p, rows *float32, d, k int, mask *[8]int32, out *float32)

// prefetch asks for the three cache lines of a row at p (45 floats) ahead
// of their use.
//
//go:noescape
func prefetch(p *float32)

// prefetchSpan asks for the cache lines of the n ≥ 1 bytes at p ahead of
// their use.
//
//go:noescape
func prefetchSpan(p unsafe.Pointer, n int)

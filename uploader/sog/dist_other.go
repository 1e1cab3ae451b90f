//go:build !amd64

package sog

import "unsafe"

const haveAVX2 = false

func sqDistsAVX2(p, rows *float32, d, k int, mask *[8]int32, out *float32) {
	panic("sog: no AVX2 kernel on this architecture")
}

func prefetch(p *float32) {}

func prefetchSpan(p unsafe.Pointer, n int) {}

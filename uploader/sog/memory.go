package sog

// DefaultMemory is the bound of an encoding given none: the systemd unit's
// MemoryMax (1 GiB) less room for the rest of a process.
const DefaultMemory = 896 << 20

// The memory an encoding holds, phase by phase, for n splats (the images
// have about n pixels each): the first pass's sample (sampleRowBytes a
// sampled splat), the Morton sort (sortBytes a splat), then each image
// pass: every splat's place in the order (4 bytes) and, per image of the
// pass, its pixels and its WebP (imageBytes a pixel). fixedMemory is the
// rest: the runtime, read buffers, codebooks and the palette.
const (
	fixedMemory = 64 << 20
	sortBytes   = 16
	placeBytes  = 4
	imageBytes  = 8
	maxSample   = 1 << 20 // splats the palette and codebooks are fitted on
)

// sampleRowBytes is the memory of one sampled splat at bands: its values
// and the palette search's work arrays.
func sampleRowBytes(bands int) int64 { return int64(6+RestCount(bands))*4*13/10 + 16 }

// MinMemory is about the least memory an encoding of n splats at bands SH
// bands takes (one image a pass).
func MinMemory(n int64, bands int) int64 {
	return fixedMemory + max(min(n, maxSample)*sampleRowBytes(bands), sortBytes*n, (2*placeBytes+imageBytes)*n)
}

// plan is how an encoding fits its memory.
type plan struct {
	perPass  int  // images filled a pass
	keepPos  bool // the first pass keeps the positions (no pass for the sort)
	parallel bool // the palette is fitted while the positions are sorted
	fuse     bool // the palette's labels are kept through the sort (one pass for both)
}

func makePlan(n int64, bands int, memory int64) plan {
	if memory <= 0 {
		memory = DefaultMemory
	}
	memory = max(memory, MinMemory(n, bands)) - fixedMemory
	sample := min(n, maxSample) * sampleRowBytes(bands)
	p := plan{perPass: int(max(1, (memory-2*placeBytes*n)/(imageBytes*n)))}
	// Arrays freed between phases are garbage until a collection, so the
	// optional overlaps keep to half the memory.
	p.keepPos = sample+20*n <= memory/2
	p.parallel = sample+sortBytes*n+12*n <= memory/2
	p.fuse = (sortBytes+placeBytes)*n <= memory/2
	return p
}

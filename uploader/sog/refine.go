package sog

import (
	"context"
	"runtime"
)

// The Morton order and, past the sample, the palette's refinement: each
// reads the source once, or both share one pass when the positions were
// not kept and the labels fit beside the sort.

// order sorts the splats along a Z-order curve of their positions
// (mortonKeys) and sets each splat's place in it; with refine, its pass
// (there is one when the positions were not kept) also refines the
// palette.
func (e *encoder) order(ctx context.Context, refine bool) error {
	for a := 0; a < 3; a++ {
		e.logLo[a], e.logHi[a] = logTransform(e.lo[a]), logTransform(e.hi[a])
	}
	m := newMorton(e.n, e.lo, e.hi)
	keys := make([]uint64, e.n)
	rl := recordLen(e.bands)
	switch {
	case e.pos != nil:
		for i := range keys {
			keys[i] = m.key(e.pos[3*i:3*i+3], i)
		}
		e.pos = nil
	case refine:
		err := e.refinePass(ctx, func(i int, rec []float32) { keys[i] = m.key(rec[:3], i) })
		if err != nil {
			return err
		}
	default:
		err := e.src.pass(ctx, 3, func(first int, recs []float32) error {
			for r := 0; r*rl < len(recs); r++ {
				keys[first+r] = m.key(recs[r*rl:r*rl+3], first+r)
			}
			e.progress(len(recs) / rl)
			return nil
		})
		if err != nil {
			return err
		}
	}
	m.sort(keys)
	e.place = make([]uint32, e.n)
	mask := uint64(1)<<m.idxBits - 1
	for t, k := range keys {
		e.place[k&mask] = uint32(t)
	}
	return nil
}

// refinePalette finds every splat's palette entry, by the descent of the
// fit on the sample, and moves each entry to the mean of its splats: the
// palette's error comes near a fit on the whole scene (docs/formats.md)
// for one more pass. Each splat's entry is kept (4 bytes a splat) for the
// labels' image.
func (e *encoder) refinePalette(ctx context.Context) error {
	return e.refinePass(ctx, nil)
}

// refinePass is refinePalette's pass, also calling each (when set) with
// every splat's index and record, from any core.
func (e *encoder) refinePass(ctx context.Context, each func(i int, rec []float32)) error {
	workers := runtime.GOMAXPROCS(0)
	rs := make([]*refiner, workers)
	for w := range rs {
		rs[w] = e.pal.newRefiner()
	}
	sampled := e.pal.labels
	e.pal.labels = make([]uint32, e.n)
	rl := recordLen(e.bands)
	err := e.src.pass(ctx, rl, func(first int, recs []float32) error {
		n := len(recs) / rl
		inParallel(n, workers, func(w, lo, hi int) {
			e.refineRows(first+lo, recs[lo*rl:hi*rl], rs[w], sampled, each)
		})
		e.progress(n)
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	e.pal.refine(rs)
	return nil
}

// refineAhead is how many rows ahead refineRows fetches the sums.
const refineAhead = 4

// refineRows labels the records of recs, the first one splat first, and
// adds them to rf.
func (e *encoder) refineRows(first int, recs []float32, rf *refiner, sampled []uint32, each func(int, []float32)) {
	rl := recordLen(e.bands)
	n := len(recs) / rl
	var rows [labelBatchRows][]float32
	var idx [labelBatchRows]int
	var got [labelBatchRows]uint32
	batch := 0
	flush := func() {
		e.pal.labelBatch(rows[:batch], got[:batch])
		for k := range batch {
			e.pal.labels[idx[k]] = got[k]
		}
		batch = 0
	}
	for r := range n {
		i, rec := first+r, recs[r*rl:(r+1)*rl]
		if each != nil {
			each(i, rec)
		}
		if i%e.step == 0 {
			e.pal.labels[i] = sampled[i/e.step] // what the descent finds for it
			continue
		}
		rows[batch], idx[batch] = rec[14:], i
		if batch++; batch == labelBatchRows {
			flush()
		}
	}
	flush()
	for r := range n {
		if r+refineAhead < n {
			rf.fetch(e.pal.labels[first+r+refineAhead], e.rest)
		}
		rf.add(recs[r*rl+14:(r+1)*rl], e.pal.labels[first+r], e.rest)
	}
}

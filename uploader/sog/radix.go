package sog

// radixSort sorts keys ascending, stably, moving vals (nil: none) with
// them, in passes of digitBits (≤ 11) bits from the lowest; bits above
// passes×digitBits must be zero. tmpKeys and tmpVals (nil with vals) are
// scratch of the same length. Both end sorted in place. The Morton order
// (30-bit keys with their splats' indices) and the codebooks' float sort
// (32-bit keys alone) share it.
func radixSort(keys, vals, tmpKeys, tmpVals []uint32, digitBits, passes int) {
	var counts [1 << 11]int
	mask := uint32(1)<<digitBits - 1
	srcK, srcV, dstK, dstV := keys, vals, tmpKeys, tmpVals
	for p := 0; p < passes; p++ {
		shift := p * digitBits
		clear(counts[:])
		for _, k := range srcK {
			counts[k>>shift&mask]++
		}
		sum := 0
		for d := range counts[:mask+1] {
			counts[d], sum = sum, sum+counts[d]
		}
		if srcV == nil {
			for _, k := range srcK {
				o := counts[k>>shift&mask]
				counts[k>>shift&mask]++
				dstK[o] = k
			}
		} else {
			for i, k := range srcK {
				o := counts[k>>shift&mask]
				counts[k>>shift&mask]++
				dstK[o], dstV[o] = k, srcV[i]
			}
		}
		srcK, srcV, dstK, dstV = dstK, dstV, srcK, srcV
	}
	if passes%2 == 1 {
		copy(keys, srcK)
		copy(vals, srcV)
	}
}

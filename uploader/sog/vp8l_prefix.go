package sog

import (
	"cmp"
	"math/bits"
	"slices"
)

// prefix is a canonical prefix code: each symbol's length and its code,
// bit-reversed for the LSB-first stream.
type prefix struct {
	length []uint8
	code   []uint16
}

func newPrefix(lengths []uint8) prefix {
	var count [maxCodeLen + 1]int
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	var next [maxCodeLen + 2]int
	code := 0
	for l := 1; l <= maxCodeLen; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	p := prefix{length: lengths, code: make([]uint16, len(lengths))}
	nonzero := 0
	for _, c := range count {
		nonzero += c
	}
	if nonzero == 1 {
		p.length = make([]uint8, len(lengths)) // a single symbol takes no bits
		return p
	}
	for s, l := range lengths {
		if l > 0 {
			p.code[s] = uint16(bits.Reverse32(uint32(next[l])) >> (32 - uint(l)))
			next[l]++
		}
	}
	return p
}

// huffLengths is a prefix code's lengths for counts, at most limit bits:
// Huffman's, with the smallest counts raised until it fits. A single used
// symbol gets length 1, which the decoder reads as a code of no bits.
func huffLengths(counts []uint32, limit int) []uint8 {
	lengths := make([]uint8, len(counts))
	used := usedSymbols(counts)
	if len(used) == 1 {
		lengths[used[0]] = 1
	}
	if len(used) < 2 {
		return lengths
	}
	for floor := uint64(1); ; floor *= 2 {
		depth := huffDepths(counts, used, floor)
		tooLong := false
		for i, s := range used {
			lengths[s] = depth[i]
			if int(depth[i]) > limit {
				tooLong = true
			}
		}
		if !tooLong {
			return lengths
		}
	}
}

// usedSymbols is the symbols of counts with a nonzero count, in order.
func usedSymbols(counts []uint32) []int {
	var used []int
	for s, c := range counts {
		if c > 0 {
			used = append(used, s)
		}
	}
	return used
}

// huffDepths is the depth of each used symbol in a Huffman tree over
// counts, each count raised to at least floor.
func huffDepths(counts []uint32, used []int, floor uint64) []uint8 {
	type node struct {
		w           uint64
		left, right int
	}
	nodes := make([]node, 0, 2*len(used))
	for _, s := range used {
		nodes = append(nodes, node{max(floor, uint64(counts[s])), -1, s})
	}
	leaves := make([]int, len(used))
	for i := range leaves {
		leaves[i] = i
	}
	slices.SortStableFunc(leaves, func(a, b int) int { return cmp.Compare(nodes[a].w, nodes[b].w) })
	var inner []int
	li, ii := 0, 0
	pick := func() int {
		if li < len(leaves) && (ii >= len(inner) || nodes[leaves[li]].w <= nodes[inner[ii]].w) {
			li++
			return leaves[li-1]
		}
		ii++
		return inner[ii-1]
	}
	for k := 0; k < len(used)-1; k++ {
		a, b := pick(), pick()
		nodes = append(nodes, node{nodes[a].w + nodes[b].w, a, b})
		inner = append(inner, len(nodes)-1)
	}
	depth := make([]uint8, len(nodes))
	for i := len(nodes) - 1; i >= len(used); i-- {
		for _, c := range []int{nodes[i].left, nodes[i].right} {
			depth[c] = depth[i] + 1
		}
	}
	return depth[:len(used)]
}

var codeLengthOrder = [19]uint8{17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// writePrefix writes the code for counts and returns it.
func writePrefix(bw *bitWriter, counts []uint32) prefix {
	used := usedSymbols(counts)
	if len(used) == 0 {
		used = []int{0}
	}
	if len(used) <= 2 && used[len(used)-1] < 256 {
		return writeSimplePrefix(bw, used, len(counts))
	}
	lengths := huffLengths(counts, maxCodeLen)
	bw.write(0, 1)
	writeCodeLengths(bw, lengthTokens(lengths))
	return newPrefix(lengths)
}

// writeSimplePrefix writes the simple code of one or two used symbols
// below 256, over an alphabet of size symbols, and returns it.
func writeSimplePrefix(bw *bitWriter, used []int, size int) prefix {
	lengths := make([]uint8, size)
	bw.write(1, 1)
	bw.write(uint64(len(used)-1), 1)
	if used[0] < 2 {
		bw.write(0, 1)
		bw.write(uint64(used[0]), 1)
	} else {
		bw.write(1, 1)
		bw.write(uint64(used[0]), 8)
	}
	if len(used) == 2 {
		bw.write(uint64(used[1]), 8)
		lengths[used[0]], lengths[used[1]] = 1, 1
	}
	return newPrefix(lengths)
}

// lengthToken is one code-length symbol (0-15 a length, 16-18 a repeat)
// with its repeat count's extra bits.
type lengthToken struct{ sym, extra uint8 }

// lengthTokens is lengths run-length coded into code-length symbols.
func lengthTokens(lengths []uint8) []lengthToken {
	var toks []lengthToken
	prev := uint8(8)
	for i := 0; i < len(lengths); {
		l := lengths[i]
		run := 1
		for i+run < len(lengths) && lengths[i+run] == l {
			run++
		}
		if l == 0 {
			toks = appendZeroRun(toks, run)
		} else {
			r := run
			if prev != l {
				toks = append(toks, lengthToken{l, 0})
				prev = l
				r--
			}
			toks = appendRepeatRun(toks, l, r)
		}
		i += run
	}
	return toks
}

// appendZeroRun appends tokens for run zero lengths: 18 and 17 for long
// and short runs, literal zeros for the rest.
func appendZeroRun(toks []lengthToken, run int) []lengthToken {
	for r := run; r > 0; {
		switch {
		case r >= 11:
			n := min(r, 138)
			toks = append(toks, lengthToken{18, uint8(n - 11)})
			r -= n
		case r >= 3:
			toks = append(toks, lengthToken{17, uint8(r - 3)})
			r = 0
		default:
			toks = append(toks, lengthToken{0, 0})
			r--
		}
	}
	return toks
}

// appendRepeatRun appends tokens for r more lengths of l after one already
// written: 16 repeats of the previous length, literals for the rest.
func appendRepeatRun(toks []lengthToken, l uint8, r int) []lengthToken {
	for r > 0 {
		if r >= 3 {
			n := min(r, 6)
			toks = append(toks, lengthToken{16, uint8(n - 3)})
			r -= n
		} else {
			toks = append(toks, lengthToken{l, 0})
			r--
		}
	}
	return toks
}

// writeCodeLengths writes the code-length code and then toks in it.
func writeCodeLengths(bw *bitWriter, toks []lengthToken) {
	var clCounts [19]uint32
	for _, t := range toks {
		clCounts[t.sym]++
	}
	clLens := huffLengths(clCounts[:], maxCLCodeLen)
	n := 4
	for i := range codeLengthOrder {
		if clLens[codeLengthOrder[i]] != 0 {
			n = max(n, i+1)
		}
	}
	bw.write(uint64(n-4), 4)
	for i := 0; i < n; i++ {
		bw.write(uint64(clLens[codeLengthOrder[i]]), 3)
	}
	bw.write(0, 1) // every symbol's length follows
	cl := newPrefix(clLens)
	for _, t := range toks {
		bw.write(uint64(cl.code[t.sym]), uint(cl.length[t.sym]))
		switch t.sym {
		case 16:
			bw.write(uint64(t.extra), 2)
		case 17:
			bw.write(uint64(t.extra), 3)
		case 18:
			bw.write(uint64(t.extra), 7)
		}
	}
}

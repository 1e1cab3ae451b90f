package sog

// Squared distances for the SH palette's k-means, the encoder's hot loop.
// Every distance is summed in the one fixed order of docs/formats.md, "The SH
// palette", so the AVX2 kernel (dist_amd64.s) and the Go below give the same
// floats.

// tailMasks[t] loads the first t floats of a group of eight.
var tailMasks = func() (m [8][8]int32) {
	for t := range m {
		for i := 0; i < t; i++ {
			m[t][i] = -1
		}
	}
	return m
}()

// sqDists writes the squared distance of p to each row of rows (len(p)
// floats each) to out.
func sqDists(p, rows []float32, out []float32) {
	d := len(p)
	k := len(rows) / d
	if k == 0 {
		return
	}
	_ = out[k-1]
	if haveAVX2 {
		sqDistsAVX2(&p[0], &rows[0], d, k, &tailMasks[d%8], &out[0])
		return
	}
	for c := 0; c < k; c++ {
		out[c] = sqDistGo(p, rows[c*d:(c+1)*d])
	}
}

// sqDist is the squared distance of a and b (len(a) floats each).
func sqDist(a, b []float32) float32 {
	var out [1]float32
	sqDists(a, b[:len(a)], out[:])
	return out[0]
}

// sqDistGo is the distance in Go, in the lanes' order.
func sqDistGo(a, b []float32) float32 {
	b = b[:len(a)]
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		d0, d1, d2, d3 := x[0]-y[0], x[1]-y[1], x[2]-y[2], x[3]-y[3]
		d4, d5, d6, d7 := x[4]-y[4], x[5]-y[5], x[6]-y[6], x[7]-y[7]
		l0 += float32(d0 * d0)
		l1 += float32(d1 * d1)
		l2 += float32(d2 * d2)
		l3 += float32(d3 * d3)
		l4 += float32(d4 * d4)
		l5 += float32(d5 * d5)
		l6 += float32(d6 * d6)
		l7 += float32(d7 * d7)
	}
	var t [8]float32
	for k := 0; i+k < len(a); k++ {
		d := a[i+k] - b[i+k]
		t[k] = float32(d * d)
	}
	l0, l1, l2, l3 = l0+t[0], l1+t[1], l2+t[2], l3+t[3]
	l4, l5, l6, l7 = l4+t[4], l5+t[5], l6+t[6], l7+t[7]
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

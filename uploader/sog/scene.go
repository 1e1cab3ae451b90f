package sog

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// WriteScene writes a deterministic synthetic 3DGS PLY of n splats with
// bands SH bands (0..3) for tests and benchmarks: splats in a few dozen
// clumps of different sizes, log scales, opacities and colours spread as
// trained scenes spread them, random rotations, and SH coefficients that
// vary smoothly within a clump (so that a palette has structure to find).
// The same n, bands and seed always give the same bytes.
func WriteScene(w io.Writer, n, bands int, seed uint64) error {
	if n < 1 || bands < 0 || bands > 3 {
		return fmt.Errorf("sog: WriteScene(%d splats, %d bands)", n, bands)
	}
	rest := RestCount(bands)
	bw := bufio.NewWriterSize(w, 1<<16)
	props := writeSceneHeader(bw, n, rest)
	r := rng(seed | 1)
	cl := sceneClumps(&r, rest)
	rec := make([]float32, props)
	buf := make([]byte, 4*len(rec))
	for i := 0; i < n; i++ {
		sceneSplat(rec, cl[int(r.next()%sceneClumpCount)], &r, rest)
		for k, v := range rec {
			binary.LittleEndian.PutUint32(buf[4*k:], math.Float32bits(v))
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeSceneHeader writes the PLY header of n float records with rest
// f_rest properties and returns the properties' count.
func writeSceneHeader(bw *bufio.Writer, n, rest int) int {
	fmt.Fprintf(bw, "ply\nformat binary_little_endian 1.0\nelement vertex %d\n", n)
	props := []string{"x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"}
	for i := 0; i < rest; i++ {
		props = append(props, fmt.Sprintf("f_rest_%d", i))
	}
	props = append(props, "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
	for _, p := range props {
		fmt.Fprintf(bw, "property float %s\n", p)
	}
	bw.WriteString("end_header\n")
	return len(props)
}

// sceneClumpCount is the clumps of a synthetic scene.
const sceneClumpCount = 48

// sceneClump is one clump of a synthetic scene: its splats scatter about
// centre within radius, with colours and SH near its own.
type sceneClump struct {
	centre, dc [3]float64
	radius     float64
	sh         []float64
}

// gauss is a standard normal draw from r (Box-Muller).
func (r *rng) gauss() float64 {
	u, v := r.unit(), r.unit()
	return math.Sqrt(-2*math.Log(1-u)) * math.Cos(2*math.Pi*v)
}

// sceneClumps draws a scene's clumps with rest SH coefficients each.
func sceneClumps(r *rng, rest int) []sceneClump {
	cl := make([]sceneClump, sceneClumpCount)
	for c := range cl {
		for a := 0; a < 3; a++ {
			cl[c].centre[a] = r.gauss() * 4
			cl[c].dc[a] = r.gauss() * 0.8
		}
		cl[c].radius = math.Exp(r.gauss()*0.7 - 0.5)
		cl[c].sh = make([]float64, rest)
		for k := range cl[c].sh {
			cl[c].sh[k] = r.gauss() * 0.15
		}
	}
	return cl
}

// sceneSplat draws one splat of clump c into rec, in the header's order.
func sceneSplat(rec []float32, c sceneClump, r *rng, rest int) {
	for a := 0; a < 3; a++ {
		rec[a] = float32(c.centre[a] + r.gauss()*c.radius)
		rec[3+a] = 0
		rec[6+a] = float32(c.dc[a] + r.gauss()*0.3)
	}
	for k := 0; k < rest; k++ {
		rec[9+k] = float32(c.sh[k] + r.gauss()*0.04)
	}
	o := 9 + rest
	rec[o] = float32(r.gauss()*2 + 1)
	for a := 0; a < 3; a++ {
		rec[o+1+a] = float32(r.gauss()*0.8 - 4)
	}
	var q [4]float64
	l := 0.0
	for a := range q {
		q[a] = r.gauss()
		l += q[a] * q[a]
	}
	for a := range q {
		rec[o+4+a] = float32(q[a] / math.Sqrt(l))
	}
}

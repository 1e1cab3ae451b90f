package sog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxSplats is the most splats one SOG holds: WebP images are at most
// 16383 pixels a side, and the encoder pads both sides to multiples of 4.
const MaxSplats = 16380 * 16380

// maxHeader bounds the PLY header read before the first splat.
const maxHeader = 64 << 10

// Splats holds a scene column by column, as the encoder needs it: the
// position interleaved (x y z per splat), every other attribute in the
// units the 3DGS PLY stores (log scales, logit opacity, raw rotation).
type Splats struct {
	N       int
	Bands   int          // SH bands beyond the DC term: 0..3
	Pos     []float32    // 3N, interleaved
	Rot     [4][]float32 // rot_0..3 (w x y z)
	Scale   [3][]float32 // log scales
	Opacity []float32    // logit
	DC      [3][]float32 // f_dc_0..2
	Rest    []float32    // N × RestCount(Bands), f_rest_* in file order
}

// RestCount is the number of f_rest_* values a splat has at bands SH bands.
func RestCount(bands int) int { return [...]int{0, 9, 24, 45}[bands] }

// plyType is a PLY scalar type the reader decodes.
type plyType struct {
	size int
	get  func([]byte) float32
	f32  bool // a little-endian float32, decoded inline on the fast path
}

var plyTypes = map[string]plyType{
	"float":   {4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }, true},
	"float32": {4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }, true},
	"double":  {8, func(b []byte) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(b))) }, false},
	"float64": {8, func(b []byte) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(b))) }, false},
	"uchar":   {1, func(b []byte) float32 { return float32(b[0]) }, false},
	"uint8":   {1, func(b []byte) float32 { return float32(b[0]) }, false},
	"char":    {1, func(b []byte) float32 { return float32(int8(b[0])) }, false},
	"int8":    {1, func(b []byte) float32 { return float32(int8(b[0])) }, false},
	"ushort":  {2, func(b []byte) float32 { return float32(binary.LittleEndian.Uint16(b)) }, false},
	"uint16":  {2, func(b []byte) float32 { return float32(binary.LittleEndian.Uint16(b)) }, false},
	"short":   {2, func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) }, false},
	"int16":   {2, func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) }, false},
	"uint":    {4, func(b []byte) float32 { return float32(binary.LittleEndian.Uint32(b)) }, false},
	"uint32":  {4, func(b []byte) float32 { return float32(binary.LittleEndian.Uint32(b)) }, false},
	"int":     {4, func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) }, false},
	"int32":   {4, func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) }, false},
}

type plyColumn struct {
	name   string
	offset int
	typ    plyType
}

// plyLayout is the vertex element of a PLY header: its count, record
// stride and columns, and the bytes of elements that precede it.
type plyLayout struct {
	count  int
	stride int
	cols   map[string]plyColumn
	skip   int64 // bytes of elements before "vertex"
	header int64 // bytes of the header
}

// ReadPLY reads a binary little-endian 3DGS PLY from r, one record at a
// time: memory is the columns it returns (about 4 bytes a value), never the
// file. It needs x y z, f_dc_0..2, opacity, scale_0..2 and rot_0..3, and
// takes 0, 9, 24 or 45 f_rest_* values.
func ReadPLY(r io.Reader) (*Splats, error) { return readPLY(r, 0) }

// readPLY is ReadPLY of a source of size bytes (0: unknown). When the
// size holds every record the header promises, the columns are made at
// their full size at once; otherwise they grow as records arrive, so that
// a header promising more than the file holds costs no more than the file.
func readPLY(r io.Reader, size int64) (*Splats, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	lay, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, br, lay.skip); err != nil {
		return nil, fmt.Errorf("ply: elements before vertex: %w", err)
	}
	s, cols, err := newSplats(lay, size > 0 && lay.header+lay.skip+int64(lay.count)*int64(lay.stride) <= size)
	if err != nil {
		return nil, err
	}
	rest := RestCount(s.Bands)
	offs := make([]int, len(cols))
	allF32 := true
	for i, c := range cols {
		offs[i], allF32 = c.offset, allF32 && c.typ.f32
	}
	// Records are read a chunk at a time (one read call for hundreds).
	per := max(1, plyChunk/lay.stride)
	buf := make([]byte, per*lay.stride)
	vals := make([]float32, len(cols))
	for i := 0; i < s.N; {
		m := min(per, s.N-i)
		if got, err := io.ReadFull(br, buf[:m*lay.stride]); err != nil {
			return nil, fmt.Errorf("ply: splat %d of %d: %w", i+got/lay.stride, s.N, unexpected(err))
		}
		for r := 0; r < m; r++ {
			rec := buf[r*lay.stride : (r+1)*lay.stride]
			if allF32 { // the 3DGS trainers' layout: no call per value
				for c, o := range offs {
					vals[c] = math.Float32frombits(binary.LittleEndian.Uint32(rec[o:]))
				}
			} else {
				for c, o := range offs {
					vals[c] = cols[c].typ.get(rec[o:])
				}
			}
			s.appendSplat(vals, rest)
		}
		i += m
	}
	return s, nil
}

// plyChunk is the bytes of records read at once.
const plyChunk = 256 << 10

// appendSplat appends one splat's values, in newSplats' column order.
func (s *Splats) appendSplat(v []float32, rest int) {
	s.Pos = append(s.Pos, v[0], v[1], v[2])
	for k := 0; k < 3; k++ {
		s.DC[k] = append(s.DC[k], v[3+k])
		s.Scale[k] = append(s.Scale[k], v[7+k])
	}
	s.Opacity = append(s.Opacity, v[6])
	for k := 0; k < 4; k++ {
		s.Rot[k] = append(s.Rot[k], v[10+k])
	}
	s.Rest = append(s.Rest, v[14:14+rest]...)
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// newSplats allocates the columns for lay and resolves the properties the
// encoder reads, in the order ReadPLY indexes them.
func newSplats(lay *plyLayout, whole bool) (*Splats, []plyColumn, error) {
	cols, bands, err := resolveColumns(lay)
	if err != nil {
		return nil, nil, err
	}
	rest := RestCount(bands)
	n := min(lay.count, 1<<16)
	if whole {
		n = lay.count
	}
	s := &Splats{N: lay.count, Bands: bands, Pos: make([]float32, 0, 3*n), Opacity: make([]float32, 0, n), Rest: make([]float32, 0, n*rest)}
	for k := 0; k < 3; k++ {
		s.Scale[k], s.DC[k] = make([]float32, 0, n), make([]float32, 0, n)
	}
	for k := 0; k < 4; k++ {
		s.Rot[k] = make([]float32, 0, n)
	}
	return s, cols, nil
}

// resolveColumns finds the properties the encoder reads in lay, in record
// order (recordLen), and the SH bands they hold.
func resolveColumns(lay *plyLayout) ([]plyColumn, int, error) {
	names := []string{"x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
		"scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"}
	rest := 0
	for ; ; rest++ {
		if _, ok := lay.cols[fmt.Sprintf("f_rest_%d", rest)]; !ok {
			break
		}
	}
	bands := -1
	for b := 0; b <= 3; b++ {
		if RestCount(b) == rest {
			bands = b
		}
	}
	if bands < 0 {
		return nil, 0, fmt.Errorf("ply: %d f_rest values is not 0, 9, 24 or 45", rest)
	}
	for k := 0; k < rest; k++ {
		names = append(names, fmt.Sprintf("f_rest_%d", k))
	}
	cols := make([]plyColumn, len(names))
	for i, n := range names {
		c, ok := lay.cols[n]
		if !ok {
			return nil, 0, fmt.Errorf("ply: vertex has no %q property", n)
		}
		cols[i] = c
	}
	return cols, bands, nil
}

// readHeader parses the PLY header up to end_header.
func readHeader(br *bufio.Reader) (*plyLayout, error) {
	var lay *plyLayout
	var cur string
	var curCount, curStride int64
	var read int
	var skip int64
	endElement := func() {
		if cur != "vertex" && lay == nil {
			skip += curCount * curStride
		}
	}
	for line := 0; ; line++ {
		text, err := br.ReadString('\n')
		read += len(text)
		if err != nil || read > maxHeader {
			return nil, errors.New("ply: no end_header within the first 64 KiB")
		}
		f := strings.Fields(text)
		if line == 0 {
			if len(f) != 1 || f[0] != "ply" {
				return nil, errors.New("ply: not a PLY file")
			}
			continue
		}
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "format":
			if len(f) < 2 || f[1] != "binary_little_endian" {
				return nil, fmt.Errorf("ply: format %q: only binary_little_endian is encoded", strings.Join(f[1:], " "))
			}
		case "element":
			endElement()
			if len(f) != 3 {
				return nil, fmt.Errorf("ply: bad element line %q", strings.TrimSpace(text))
			}
			c, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || c < 0 {
				return nil, fmt.Errorf("ply: bad element count %q", f[2])
			}
			cur, curCount, curStride = f[1], c, 0
			if cur == "vertex" {
				if lay != nil {
					return nil, errors.New("ply: two vertex elements")
				}
				if c < 1 || c > MaxSplats {
					return nil, fmt.Errorf("ply: %d splats: a SOG holds 1 to %d", c, MaxSplats)
				}
				lay = &plyLayout{count: int(c), cols: map[string]plyColumn{}, skip: skip}
			}
		case "property":
			if len(f) != 3 {
				return nil, fmt.Errorf("ply: property %q: lists are not encoded", strings.TrimSpace(text))
			}
			t, ok := plyTypes[f[1]]
			if !ok {
				return nil, fmt.Errorf("ply: property type %q", f[1])
			}
			if cur == "vertex" && lay != nil {
				lay.cols[f[2]] = plyColumn{name: f[2], offset: lay.stride, typ: t}
				lay.stride += t.size
			}
			curStride += int64(t.size)
		case "end_header":
			endElement()
			if lay == nil {
				return nil, errors.New("ply: no vertex element")
			}
			lay.header = int64(read)
			return lay, nil
		}
	}
}

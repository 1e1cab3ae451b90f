package sog

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// passRecords is the most records a pass hands over at once.
const passRecords = 1 << 14

// memSource is splats in memory (Encode's).
type memSource struct{ s *Splats }

func (m *memSource) count() int  { return m.s.N }
func (m *memSource) bands() int  { return m.s.Bands }
func (m *memSource) size() int64 { return 0 }

func (m *memSource) pass(ctx context.Context, cols int, fn func(int, []float32) error) error {
	s := m.s
	rest := RestCount(s.Bands)
	rl := recordLen(s.Bands)
	if len(s.Pos) != 3*s.N || len(s.Opacity) != s.N || len(s.Rest) != rest*s.N {
		return &FormatError{errors.New("sog: splats' columns do not hold N splats")}
	}
	recs := make([]float32, min(s.N, passRecords)*rl)
	for first := 0; first < s.N; first += passRecords {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(passRecords, s.N-first)
		for r := 0; r < n; r++ {
			i, rec := first+r, recs[r*rl:(r+1)*rl]
			copy(rec[0:3], s.Pos[3*i:3*i+3])
			if cols <= 3 {
				continue
			}
			rec[3], rec[4], rec[5], rec[6] = s.DC[0][i], s.DC[1][i], s.DC[2][i], s.Opacity[i]
			rec[7], rec[8], rec[9] = s.Scale[0][i], s.Scale[1][i], s.Scale[2][i]
			rec[10], rec[11], rec[12], rec[13] = s.Rot[0][i], s.Rot[1][i], s.Rot[2][i], s.Rot[3][i]
			copy(rec[14:], s.Rest[i*rest:(i+1)*rest])
		}
		if err := fn(first, recs[:n*rl]); err != nil {
			return err
		}
	}
	return nil
}

// plySource is a binary little-endian 3DGS PLY read in place: each pass
// reads its records again, a run at a time, from the one descriptor.
type plySource struct {
	r     io.ReaderAt
	lay   *plyLayout
	cols  []plyColumn
	nb    int
	data  int64 // offset of the first record
	f32   bool  // every column a float32
	bytes int64
}

// openPLY reads the header of the size-byte PLY r holds. Its records must
// all lie within size: nothing is allocated for splats the file does not
// hold.
func openPLY(r io.ReaderAt, size int64) (*plySource, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, min(size, maxHeader)), 4096)
	lay, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	cols, bands, err := resolveColumns(lay)
	if err != nil {
		return nil, err
	}
	data := lay.header + lay.skip
	records := int64(lay.count) * int64(lay.stride)
	if lay.stride == 0 || data > size || records > size-data {
		return nil, fmt.Errorf("ply: %d splats of %d bytes need %d bytes after the header; the file has %d: %w",
			lay.count, lay.stride, records, max(0, size-data), io.ErrUnexpectedEOF)
	}
	p := &plySource{r: r, lay: lay, cols: cols, nb: bands, data: data, f32: true, bytes: records}
	for _, c := range cols {
		p.f32 = p.f32 && c.typ.f32
	}
	return p, nil
}

func (p *plySource) count() int  { return p.lay.count }
func (p *plySource) bands() int  { return p.nb }
func (p *plySource) size() int64 { return p.bytes }

// pass reads and decodes the next run on another goroutine while fn takes
// the last one (two runs' buffers: fn's work and the read overlap).
func (p *plySource) pass(ctx context.Context, cols int, fn func(int, []float32) error) error {
	rl := recordLen(p.nb)
	per := max(1, min(passRecords, plyChunk*16/p.lay.stride))
	free := make(chan []float32, 2)
	free <- make([]float32, per*rl)
	free <- make([]float32, per*rl)
	runs := make(chan plyRun, 1)
	stop := make(chan struct{})
	defer close(stop)
	go p.readRuns(ctx, cols, per, free, runs, stop)
	for r := range runs {
		if r.err != nil {
			return r.err
		}
		if err := fn(r.first, r.recs); err != nil {
			return err
		}
		free <- r.recs[:cap(r.recs)]
	}
	return nil
}

// plyRun is a run of decoded records, the first one's index, or the error
// that ended the pass.
type plyRun struct {
	first int
	recs  []float32
	err   error
}

// readRuns sends runs of per records' first cols columns, decoded into
// buffers from free, until the last, an error or stop; it closes runs.
func (p *plySource) readRuns(ctx context.Context, cols, per int, free <-chan []float32, runs chan<- plyRun, stop <-chan struct{}) {
	defer close(runs)
	stride, rl := p.lay.stride, recordLen(p.nb)
	buf := make([]byte, per*stride)
	sr := io.NewSectionReader(p.r, p.data, p.bytes)
	use := p.cols[:min(cols, len(p.cols))]
	var fr []floatRun
	if p.f32 {
		fr = floatRuns(use)
	}
	for first := 0; first < p.lay.count; first += per {
		var recs []float32
		select {
		case recs = <-free:
		case <-stop:
			return
		}
		n := min(per, p.lay.count-first)
		err := p.readRun(ctx, sr, buf[:n*stride], first)
		if err == nil {
			decodeRecords(buf[:n*stride], stride, recs[:n*rl], rl, use, fr)
		}
		select {
		case runs <- plyRun{first, recs[:n*rl], err}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// readRun reads the records from splat first on from sr into buf, unless
// ctx is done; a short file is a FormatError.
func (p *plySource) readRun(ctx context.Context, sr io.Reader, buf []byte, first int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	got, err := io.ReadFull(sr, buf)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("ply: splat %d of %d: %w", first+got/p.lay.stride, p.lay.count, unexpected(err))
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{err}
	}
	return err
}

// decodeRecords decodes the records in buf (stride bytes each) into recs
// (rl floats each), the columns of use: through runs when every column is
// a float32 (floatRuns), else one by one.
func decodeRecords(buf []byte, stride int, recs []float32, rl int, use []plyColumn, runs []floatRun) {
	le := littleEndian && runs != nil
	for r := 0; r*stride < len(buf); r++ {
		b, rec := buf[r*stride:(r+1)*stride], recs[r*rl:(r+1)*rl]
		switch {
		case le:
			for _, run := range runs {
				dst := rec[run.dst : run.dst+run.n]
				copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*run.n), b[run.off:run.off+4*run.n])
			}
		case runs != nil:
			for _, run := range runs {
				src, dst := b[run.off:run.off+4*run.n], rec[run.dst:run.dst+run.n]
				for j := range dst {
					dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:]))
				}
			}
		default:
			for c, col := range use {
				rec[c] = col.typ.get(b[col.offset:])
			}
		}
	}
}

// floatRun is columns of float32s that lie side by side in a record, in
// the same order as in recs: n of them from byte off to float dst.
type floatRun struct{ dst, off, n int }

// floatRuns are the runs of float32 columns use.
func floatRuns(use []plyColumn) []floatRun {
	var runs []floatRun
	for c, col := range use {
		if k := len(runs) - 1; k >= 0 && runs[k].off+4*runs[k].n == col.offset {
			runs[k].n++
			continue
		}
		runs = append(runs, floatRun{dst: c, off: col.offset, n: 1})
	}
	return runs
}

// littleEndian is whether this machine's float32s are the PLY's bytes as
// they are (a run is then copied).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

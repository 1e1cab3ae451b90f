package splatfile

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/klauspost/compress/zstd"
)

// SPZ, Niantic's compressed splat format (docs/formats.md). Versions 2 and 3 are one gzip stream holding a 16-byte header
// and the attribute arrays back to back; version 4 is a 32-byte header, a
// table of contents and one ZSTD frame per attribute array. Unlike PLY and
// SOG, the check reads the whole file: the arrays' sizes are only known
// after decompression, and a corrupt byte is only found by decoding. The
// decoders stream into io.Discard, and no stream is read past the size the
// header's splat count gives it, so memory stays small whatever the file
// claims.

var (
	magicGzip = []byte{0x1f, 0x8b}
	magicSPZ  = []byte("NGSP")
)

const (
	spzHeaderV3   = 16 // v2/v3 header (inside the gzip stream)
	spzHeaderV4   = 32 // v4 header (the file's first bytes)
	spzMaxDegree  = 3  // what the converter decodes (degree 4 is refused there too)
	spzMaxTOC     = 1 << 20
	spzFlagsKnown = 0x3     // antialiased, has extensions
	spzMaxStream  = 1 << 48 // keeps the sum of the streams' sizes from overflowing
)

// spzSHCoeffs is the SH byte count per splat (all three channels) by degree.
var spzSHCoeffs = [...]int64{0, 9, 24, 45}

// spzHeader is the part of the header every version shares.
type spzHeader struct {
	version  uint32
	points   uint32
	degree   uint8
	fracBits uint8
	flags    uint8
	byte15   uint8 // v2/v3: reserved (0); v4: number of streams
}

func parseSPZHeader(b []byte) spzHeader {
	return spzHeader{
		version:  binary.LittleEndian.Uint32(b[4:]),
		points:   binary.LittleEndian.Uint32(b[8:]),
		degree:   b[12],
		fracBits: b[13],
		flags:    b[14],
		byte15:   b[15],
	}
}

// streams returns the uncompressed size of each attribute array in file
// order: positions, alphas, colours, scales, rotations and, with SH, the
// SH coefficients.
func (h spzHeader) streams() []int64 {
	n := int64(h.points)
	rot := int64(4)
	if h.version == 2 {
		rot = 3
	}
	s := []int64{9 * n, n, 3 * n, 3 * n, rot * n}
	if h.degree > 0 {
		s = append(s, spzSHCoeffs[h.degree]*n)
	}
	return s
}

// validate checks the fields every version shares.
func (h spzHeader) validate() error {
	switch {
	case h.version < 2 || h.version > 4:
		return invalidf("SPZ version %d (want 2, 3 or 4)", h.version)
	case h.points == 0:
		return invalidf("SPZ header declares 0 splats")
	case h.degree > spzMaxDegree:
		return invalidf("SPZ SH degree %d (at most %d)", h.degree, spzMaxDegree)
	case h.fracBits > 24:
		return invalidf("SPZ fractional bits %d (at most 24)", h.fracBits)
	case h.flags&^spzFlagsKnown != 0:
		return invalidf("SPZ flags 0x%02x has unknown bits", h.flags)
	}
	return nil
}

// checkSPZ validates an SPZ file whose first bytes are head.
func checkSPZ(r io.ReaderAt, size int64, head []byte) (Info, error) {
	if hasPrefix(head, magicGzip) && len(head) >= len(magicGzip) {
		return checkSPZGzip(r, size)
	}
	return checkSPZ4(r, size, head)
}

// checkSPZGzip validates SPZ v2/v3: one gzip stream (gzip's CRC catches any
// corrupt byte) whose content is exactly the header and the arrays it
// declares, and nothing after it.
func checkSPZGzip(r io.ReaderAt, size int64) (Info, error) {
	// bufio.Reader is an io.ByteReader, so the decompressor reads no byte
	// past the end of the gzip member: what br still holds after it is
	// trailing data.
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return Info{}, spzGzipError(err, size)
	}
	defer zr.Close()
	zr.Multistream(false)
	hb := make([]byte, spzHeaderV3)
	if _, err := io.ReadFull(zr, hb); err != nil {
		return Info{}, spzGzipError(err, size)
	}
	if string(hb[:4]) != string(magicSPZ) {
		return Info{}, invalidf("gzip content is not SPZ (starts with %s)", quoteStart(hb))
	}
	h := parseSPZHeader(hb)
	if err := h.validate(); err != nil {
		return Info{}, err
	}
	if h.version == 4 {
		return Info{}, invalidf("SPZ version 4 inside gzip (version 4 is not gzip-wrapped)")
	}
	if h.byte15 != 0 {
		return Info{}, invalidf("SPZ reserved header byte is %d, want 0", h.byte15)
	}
	var want int64
	for _, s := range h.streams() {
		want += s
	}
	got, err := io.Copy(io.Discard, io.LimitReader(zr, want+1))
	switch {
	case err != nil:
		return Info{}, spzGzipError(err, size)
	case got < want:
		return Info{}, invalidf("SPZ data is %d bytes, its header (%d splats) declares %d", got, h.points, want)
	case got > want:
		return Info{}, invalidf("SPZ data is longer than its header (%d splats) declares (%d bytes)", h.points, want)
	}
	// The gzip member must end here (its trailer checks CRC and length),
	// and the file with it: a second member or trailing bytes are not
	// something a reader of this format expects.
	if _, err := zr.Read(make([]byte, 1)); err != io.EOF {
		if err == nil {
			return Info{}, invalidf("SPZ data is longer than its header (%d splats) declares (%d bytes)", h.points, want)
		}
		return Info{}, spzGzipError(err, size)
	}
	if n, _ := io.Copy(io.Discard, br); n > 0 {
		return Info{}, invalidf("%d bytes after the gzip stream", n)
	}
	return Info{Kind: KindSPZ, Encoding: fmt.Sprintf("v%d gzip", h.version), Vertices: int64(h.points), Size: size}, nil
}

// spzGzipError sorts a gzip error: a stream cut short is a file still being
// written; anything else (bad header, corrupt deflate data, wrong CRC or
// length, garbage after the stream) is invalid.
func spzGzipError(err error, size int64) error {
	var corrupt flate.CorruptInputError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return incompletef("gzip stream cut short (%d bytes)", size)
	case errors.Is(err, gzip.ErrHeader):
		return invalidf("gzip: bad header or trailing data after the stream")
	case errors.Is(err, gzip.ErrChecksum):
		return invalidf("gzip: checksum or length mismatch (corrupt data)")
	case errors.As(err, &corrupt):
		return invalidf("gzip: corrupt deflate data")
	default:
		return err // an I/O error reading the file
	}
}

// checkSPZ4 validates SPZ v4: header, table of contents (one entry of
// compressed and uncompressed size per array, the latter fixed by the splat
// count), streams filling the rest of the file exactly, and each stream a
// ZSTD frame that decodes to its declared size.
func checkSPZ4(r io.ReaderAt, size int64, head []byte) (Info, error) {
	if len(head) < spzHeaderV4 {
		return Info{}, incompletef("only %d bytes written", size)
	}
	h := parseSPZHeader(head)
	if err := h.validate(); err != nil {
		return Info{}, err
	}
	if h.version != 4 {
		return Info{}, invalidf("SPZ version %d is not gzip-wrapped (only version 4 is stored bare)", h.version)
	}
	want := h.streams()
	toc := int64(binary.LittleEndian.Uint32(head[16:]))
	switch {
	case int(h.byte15) != len(want):
		return Info{}, invalidf("SPZ: %d streams for SH degree %d, want %d", h.byte15, h.degree, len(want))
	case toc < spzHeaderV4 || toc > spzMaxTOC:
		return Info{}, invalidf("SPZ: table of contents at byte %d (want %d to %d)", toc, spzHeaderV4, spzMaxTOC)
	}
	data := toc + int64(len(want))*16
	if size < data {
		return Info{}, incompletef("table of contents not written yet (%d of %d bytes)", size, data)
	}
	tb := make([]byte, data-toc)
	if _, err := r.ReadAt(tb, toc); err != nil {
		return Info{}, err
	}
	comp := make([]int64, len(want))
	end := data
	for i := range want {
		c, u := binary.LittleEndian.Uint64(tb[i*16:]), binary.LittleEndian.Uint64(tb[i*16+8:])
		if u != uint64(want[i]) {
			return Info{}, invalidf("SPZ stream %d declares %d bytes, %d splats need %d", i, u, h.points, want[i])
		}
		if c == 0 || c > spzMaxStream {
			return Info{}, invalidf("SPZ stream %d declares %d compressed bytes", i, c)
		}
		comp[i] = int64(c)
		end += int64(c)
	}
	switch {
	case size < end:
		return Info{}, incompletef("streams are %d of %d bytes", size-data, end-data)
	case size > end:
		return Info{}, invalidf("file is %d bytes, %d more than its table of contents declares (%d)", size, size-end, end)
	}
	off := data
	for i := range want {
		if err := checkZstd(io.NewSectionReader(r, off, comp[i]), want[i]); err != nil {
			return Info{}, invalidf("SPZ stream %d: %s", i, err)
		}
		off += comp[i]
	}
	return Info{Kind: KindSPZ, Encoding: "v4 zstd", Vertices: int64(h.points), Size: size}, nil
}

// checkZstd decodes one ZSTD stream into io.Discard and reports whether it
// is exactly want bytes. The decoder's window is capped by want (a frame of
// want bytes never needs more), so a hostile frame cannot make it allocate
// more than the header's splat count justifies.
func checkZstd(src io.Reader, want int64) error {
	window := uint64(1) << 17
	if w := uint64(1) << bits.Len64(uint64(want)); w > window {
		window = min(w, zstd.MaxWindowSize)
	}
	d, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(window), zstd.WithDecoderMaxMemory(uint64(want)+window))
	if err != nil {
		return err
	}
	defer d.Close()
	got, err := io.Copy(io.Discard, io.LimitReader(d, want+1))
	switch {
	case err != nil:
		return oneLineErr(err)
	case got != want:
		return fmt.Errorf("decodes to %d bytes, want %d", got, want)
	}
	return nil
}

// oneLineErr keeps a decoder's error text to one line.
func oneLineErr(err error) error { return errors.New(oneLine(err)) }

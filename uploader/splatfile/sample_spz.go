package splatfile

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
)

// WriteSPZ writes an SPZ file of the given version (2, 3 or 4) with n splats
// and SH degree 0 to 3. Versions 2 and 3 are gzip-wrapped with stored
// (uncompressed) deflate blocks and version 4 holds ZSTD frames of raw
// blocks, so the bytes depend on nothing but the arguments (no compressor's
// choices). The values are plausible, not meaningful.
func WriteSPZ(w io.Writer, n, version, degree int) error {
	if n <= 0 || version < 2 || version > 4 || degree < 0 || degree > spzMaxDegree {
		return fmt.Errorf("splatfile: WriteSPZ(n=%d, version=%d, degree=%d): want n > 0, version 2-4, degree 0-3", n, version, degree)
	}
	h := spzHeader{version: uint32(version), points: uint32(n), degree: uint8(degree), fracBits: 12}
	streams := sampleSPZStreams(h)
	head := make([]byte, spzHeaderV3, spzHeaderV4)
	copy(head, magicSPZ)
	binary.LittleEndian.PutUint32(head[4:], h.version)
	binary.LittleEndian.PutUint32(head[8:], h.points)
	head[12], head[13] = h.degree, h.fracBits
	if version < 4 {
		zw, err := gzip.NewWriterLevel(w, gzip.NoCompression)
		if err != nil {
			return err
		}
		zw.Write(head)
		for _, s := range streams {
			zw.Write(s)
		}
		return zw.Close()
	}
	head[15] = byte(len(streams))
	head = head[:spzHeaderV4]
	binary.LittleEndian.PutUint32(head[16:], spzHeaderV4)
	var frames [][]byte
	for _, s := range streams {
		f := rawZstdFrame(s)
		frames = append(frames, f)
		head = binary.LittleEndian.AppendUint64(head, uint64(len(f)))
		head = binary.LittleEndian.AppendUint64(head, uint64(len(s)))
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return nil
}

// sampleSPZStreams fills each attribute array: positions on a sphere of
// radius 1 in 24-bit fixed point, opaque alphas, mid-grey colours, small
// scales, identity rotations and small SH coefficients.
func sampleSPZStreams(h spzHeader) [][]byte {
	sizes := h.streams()
	out := make([][]byte, len(sizes))
	r := rng(0x2545f4914f6cdd1d)
	for i, sz := range sizes {
		b := make([]byte, sz)
		for j := range b {
			switch i {
			case 0: // positions: fixed point, 12 fractional bits
				b[j] = byte(r.next() >> 56)
			case 1:
				b[j] = 230
			case 2:
				b[j] = 128
			case 3:
				b[j] = 80
			case 4:
				b[j] = 128
			default:
				b[j] = 128 + byte(r.next()>>60)
			}
		}
		out[i] = b
	}
	return out
}

// rawZstdFrame wraps data in a ZSTD frame of raw (stored) blocks: a
// single-segment frame header with an 8-byte content size, no checksum.
func rawZstdFrame(data []byte) []byte {
	const maxBlock = 128 << 10
	var b bytes.Buffer
	b.Write([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0})
	binary.Write(&b, binary.LittleEndian, uint64(len(data)))
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), maxBlock)
		hdr := uint32(n) << 3 // block type 0: raw
		if n == len(data) {
			hdr |= 1 // last block
		}
		b.Write([]byte{byte(hdr), byte(hdr >> 8), byte(hdr >> 16)})
		b.Write(data[:n])
		data = data[n:]
	}
	return b.Bytes()
}

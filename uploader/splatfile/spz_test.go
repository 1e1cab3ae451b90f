package splatfile

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func spzBytes(t testing.TB, n, version, degree int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSPZ(&b, n, version, degree); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// gzipOf wraps raw SPZ content (header and arrays) in gzip, as v2/v3 are.
func gzipOf(raw []byte) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.NoCompression)
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// gunzip returns the content of a v2/v3 sample, to build variants from.
func gunzip(t testing.TB, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// spz4Compressed is a v4 file whose streams a real ZSTD encoder compressed
// with content checksums on: a flipped byte in a stream is found.
func spz4Compressed(t testing.TB, n, degree int) []byte {
	t.Helper()
	raw := gunzip(t, spzBytes(t, n, 3, degree)) // v3 content: same arrays as v4
	h := parseSPZHeader(raw)
	h.version = 4
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	head := make([]byte, spzHeaderV4)
	copy(head, raw[:spzHeaderV3])
	binary.LittleEndian.PutUint32(head[4:], 4)
	streams := h.streams()
	head[15] = byte(len(streams))
	binary.LittleEndian.PutUint32(head[16:], spzHeaderV4)
	var body []byte
	off := spzHeaderV3
	for _, s := range streams {
		c := enc.EncodeAll(raw[off:off+int(s)], nil)
		off += int(s)
		head = binary.LittleEndian.AppendUint64(head, uint64(len(c)))
		head = binary.LittleEndian.AppendUint64(head, uint64(s))
		body = append(body, c...)
	}
	return append(head, body...)
}

func flip(data []byte, at int) []byte {
	c := bytes.Clone(data)
	c[at] ^= 0x5a
	return c
}

func withByte(data []byte, at int, v byte) []byte {
	c := bytes.Clone(data)
	c[at] = v
	return c
}

func TestCheckSPZ(t *testing.T) {
	t.Parallel()
	v2, v3, v4 := spzBytes(t, 300, 2, 0), spzBytes(t, 300, 3, 3), spzBytes(t, 300, 4, 3)
	v4z := spz4Compressed(t, 300, 3)
	raw3 := gunzip(t, v3)
	ply := fixtures(t)["valid.ply"]
	tests := []struct {
		name, ext, want, reason string
		data                    []byte
		encoding                string
	}{
		{name: "v2", data: v2, want: "valid", encoding: "v2 gzip"},
		{name: "v3", data: v3, want: "valid", encoding: "v3 gzip"},
		{name: "v4 raw blocks", data: v4, want: "valid", encoding: "v4 zstd"},
		{name: "v4 compressed", data: v4z, want: "valid", encoding: "v4 zstd"},
		{name: "v3 cut", data: v3[:len(v3)-9], want: "incomplete", reason: "gzip stream cut short"},
		{name: "v4 cut in header", data: v4[:20], want: "incomplete", reason: "only 20 bytes"},
		{name: "v4 cut in toc", data: v4[:40], want: "incomplete", reason: "table of contents not written yet"},
		{name: "v4 cut in streams", data: v4[:len(v4)-1], want: "incomplete", reason: "streams are"},
		{name: "v3 trailing byte", data: append(bytes.Clone(v3), 0), want: "invalid", reason: "1 bytes after the gzip stream"},
		{name: "v3 second member", data: append(bytes.Clone(v3), gzipOf([]byte("x"))...), want: "invalid", reason: "bytes after the gzip stream"},
		{name: "v4 trailing byte", data: append(bytes.Clone(v4), 0), want: "invalid", reason: "1 more than its table of contents"},
		{name: "v3 corrupt payload", data: flip(v3, len(v3)/2), want: "invalid", reason: "checksum"},
		{name: "v4 corrupt stream", data: flip(v4z, len(v4z)-20), want: "invalid", reason: "SPZ stream 5"},
		{name: "v4 corrupt frame magic", data: flip(v4, 32+6*16), want: "invalid", reason: "SPZ stream 0"},
		{name: "v3 payload short", data: gzipOf(raw3[:len(raw3)-1]), want: "invalid", reason: "declares"},
		{name: "v3 payload long", data: gzipOf(append(bytes.Clone(raw3), 1)), want: "invalid", reason: "longer than its header"},
		{name: "v3 bare", data: raw3, want: "invalid", reason: "not gzip-wrapped"},
		{name: "gzip of ply", data: gzipOf(ply), want: "invalid", reason: "gzip content is not SPZ"},
		{name: "version 5", data: withByte(v4, 4, 5), want: "invalid", reason: "SPZ version 5"},
		{name: "version 1", data: gzipOf(withByte(raw3, 4, 1)), want: "invalid", reason: "SPZ version 1"},
		{name: "v4 in gzip", data: gzipOf(withByte(raw3, 4, 4)), want: "invalid", reason: "inside gzip"},
		{name: "zero splats", data: gzipOf(withByte(withByte(raw3, 8, 0), 9, 0)), want: "invalid", reason: "0 splats"},
		{name: "degree 4", data: withByte(v4, 12, 4), want: "invalid", reason: "SH degree 4"},
		{name: "unknown flag", data: withByte(v4, 14, 0x80), want: "invalid", reason: "unknown bits"},
		{name: "reserved byte", data: gzipOf(withByte(raw3, 15, 7)), want: "invalid", reason: "reserved"},
		{name: "stream count", data: withByte(v4, 15, 5), want: "invalid", reason: "5 streams for SH degree 3"},
		{name: "toc offset", data: withByte(v4, 16, 8), want: "invalid", reason: "table of contents at byte 8"},
		{name: "toc size", data: withByte(v4, 32+8, 1), want: "invalid", reason: "SPZ stream 0 declares"},
		{name: "fewer splats than arrays", data: withByte(v4, 8, 200), want: "invalid", reason: "456 splats need"},
		{name: "ply in .spz", data: ply, want: "invalid", reason: "PLY content in a .spz file"},
		{name: "spz in .ply", ext: ".ply", data: v4, want: "invalid", reason: "SPZ content in a .ply file"},
		{name: "gzip in .sog", ext: ".sog", data: v2, want: "invalid", reason: "SPZ content in a .sog file"},
		{name: "garbage", data: []byte("hello, not a splat"), want: "invalid", reason: "not an SPZ file"},
		{name: "empty", data: nil, want: "incomplete", reason: "empty file"},
	}
	dir := t.TempDir()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ext := tt.ext
			if ext == "" {
				ext = ".spz"
			}
			path := filepath.Join(dir, fmt.Sprintf("f%d%s", i, ext))
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			info, err := Check(path)
			assertOutcome(t, err, tt.want, tt.reason)
			if tt.want == "valid" {
				if info.Kind != KindSPZ || info.Vertices != 300 || info.Encoding != tt.encoding || info.Size != int64(len(tt.data)) {
					t.Errorf("Info = %+v, want spz %s, 300 splats, %d bytes", info, tt.encoding, len(tt.data))
				}
			}
		})
	}
}

// TestCheckSPZGrowing: every prefix of a valid SPZ, of each version, is a
// copy in progress (incomplete), never invalid.
func TestCheckSPZGrowing(t *testing.T) {
	t.Parallel()
	for _, data := range [][]byte{spzBytes(t, 40, 2, 1), spzBytes(t, 40, 3, 0), spzBytes(t, 40, 4, 2), spz4Compressed(t, 40, 3)} {
		for n := 1; n < len(data); n++ {
			_, err := check(bytes.NewReader(data[:n]), int64(n), ".spz")
			if !errors.Is(err, ErrIncomplete) {
				t.Fatalf("%d of %d bytes (%q...): %v, want incomplete", n, len(data), data[:4], err)
			}
		}
	}
}

// TestCheckSPZWindowCap: a frame that asks for a larger window than its
// stream's declared size justifies is refused before anything is allocated.
func TestCheckSPZWindowCap(t *testing.T) {
	t.Parallel()
	v4 := spzBytes(t, 10, 4, 0)
	// Stream 1 (alphas, 10 bytes): rewrite its frame header as a
	// multi-segment frame with a 1 GiB window (descriptor 0x00, window byte
	// exponent 20 -> 2^30), keeping the frame's length.
	off := spzHeaderV4 + 5*16 + int(binary.LittleEndian.Uint64(v4[spzHeaderV4:]))
	if string(v4[off:off+4]) != "\x28\xb5\x2f\xfd" {
		t.Fatalf("no frame magic at %d", off)
	}
	bad := bytes.Clone(v4)
	// 0xe0 + 8-byte size becomes 0x00 + window byte + 8 filler bytes that
	// the decoder reads as block data: it must fail on the window first.
	bad[off+4], bad[off+5] = 0x00, byte((30-10)<<3)
	path := filepath.Join(t.TempDir(), "window.spz")
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Check(path)
	assertOutcome(t, err, "invalid", "SPZ stream 1")
	if !strings.Contains(strings.ToLower(err.Error()), "window") {
		t.Errorf("error %q does not name the window", err)
	}
}

func TestSPZSampleDeterministic(t *testing.T) {
	t.Parallel()
	for v := 2; v <= 4; v++ {
		if !bytes.Equal(spzBytes(t, 500, v, 3), spzBytes(t, 500, v, 3)) {
			t.Errorf("v%d: two runs differ", v)
		}
	}
	for _, bad := range [][3]int{{0, 2, 0}, {5, 1, 0}, {5, 5, 0}, {5, 4, 4}} {
		if err := WriteSPZ(new(bytes.Buffer), bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("WriteSPZ%v accepted", bad)
		}
	}
}

func FuzzSPZ(f *testing.F) {
	f.Add(spzBytes(f, 3, 2, 0))
	f.Add(spzBytes(f, 3, 3, 1))
	f.Add(spzBytes(f, 3, 4, 0))
	f.Add(spz4Compressed(f, 5, 1))
	f.Add([]byte("NGSP"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, ".spz") })
}

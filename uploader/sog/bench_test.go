package sog

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"testing"
)

// BenchmarkTranscode encodes a generated scene with three SH bands of
// $SOG_BENCH_SPLATS splats (default 100,000), PLY read included.
func BenchmarkTranscode(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("SOG_BENCH_SPLATS")); err == nil && v > 0 {
		n = v
	}
	var ply bytes.Buffer
	if err := WriteScene(&ply, n, 3, 1); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(ply.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Transcode(context.Background(), bytes.NewReader(ply.Bytes()), int64(ply.Len()), io.Discard, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranscodeFile encodes the PLY at $SOG_BENCH_PLY (skipped when
// unset) within $SOG_BENCH_MEMORY bytes (0: DefaultMemory), as the daemon
// reads it: from the file, in passes.
func BenchmarkTranscodeFile(b *testing.B) {
	path := os.Getenv("SOG_BENCH_PLY")
	if path == "" {
		b.Skip("SOG_BENCH_PLY is not set")
	}
	memory, _ := strconv.ParseInt(os.Getenv("SOG_BENCH_MEMORY"), 10, 64)
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	for i := 0; i < b.N; i++ {
		var out countWriter
		if _, err := Transcode(context.Background(), f, fi.Size(), &out, Options{Memory: memory}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(out), "sog-bytes")
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

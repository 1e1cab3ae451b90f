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

package apisim

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// BenchmarkStoragePut measures the storage endpoint's throughput (TLS,
// sha256 and the write to Dir) for 64 MiB uploads from a plain client, the
// ceiling any uploader can reach against the simulator.
func BenchmarkStoragePut(b *testing.B) {
	for _, discard := range []bool{false, true} {
		name := "disk"
		if discard {
			name = "discard"
		}
		b.Run(name, func(b *testing.B) {
			s, err := New(Options{DiscardObjects: discard})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			hc := s.Client()
			defer hc.CloseIdleConnections()
			data := plyBytes(64 << 20)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for b.Loop() {
				u, _ := s.Sign("bench.ply")
				req, _ := http.NewRequest(http.MethodPut, u, bytes.NewReader(data))
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("PUT: %d", resp.StatusCode)
				}
			}
		})
	}
}

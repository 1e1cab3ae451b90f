package after

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReceipt feeds arbitrary bytes to the receipt reader (read through
// the watch folder, capped) and the evidence check: neither panics, a
// receipt over ReceiptMax is never decoded, and a verdict of done always
// names the file's actual sha256.
func FuzzReceipt(f *testing.F) {
	f.Add([]byte(`{"file":"a.ply","size":3,"sha256":"c0c8ac1b1b4ed07e2ec8a93a2a4f1b15f00a9cf8e8c49e83b3b5f7c0c5b6b2c3","status":"done","protocol":"legacy"}`))
	f.Add([]byte(`{"status":"duplicate","sha256":"x","size":-1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"splat":{"url":"javascript:alert(1)"}}`))
	f.Add([]byte("\x00\xff"))
	root := f.TempDir()
	file := filepath.Join(root, "a.ply")
	if err := os.WriteFile(file, []byte("ply"), 0o644); err != nil {
		f.Fatal(err)
	}
	sum, err := hashFileBytes([]byte("ply"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(ReceiptPath(file), b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := readReceiptIn(nil, root, file)
		if err == nil && len(b) > ReceiptMax {
			t.Fatalf("decoded a %d-byte receipt: %+v", len(b), r)
		}
		ev, err := CheckIn(context.Background(), nil, root, file, Service{})
		if err == nil && ev.Done && ev.SHA256 != sum {
			t.Fatalf("done with sha256 %s, the file's is %s", ev.SHA256, sum)
		}
	})
}

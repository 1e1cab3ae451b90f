package after

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeerEvidence: a fleet peer's receipt counts only when it proves the
// very content this daemon hashed published through its protocol and
// service, and names the splat.
func TestPeerEvidence(t *testing.T) {
	t.Parallel()
	svc := Service{Protocol: "v1", API: "https://api.example"}
	good := Receipt{Size: 10, SHA256: "abc", Status: "done", Protocol: "v1", API: svc.API, Splat: ReceiptSplat{ID: "s1"}}
	for _, tt := range []struct {
		name string
		edit func(*Receipt)
		why  string
	}{
		{"done", func(*Receipt) {}, ""},
		{"duplicate", func(r *Receipt) { r.Status = "duplicate" }, ""},
		{"failed", func(r *Receipt) { r.Status = "failed" }, "not done"},
		{"other content", func(r *Receipt) { r.SHA256 = "def" }, "other content"},
		{"other size", func(r *Receipt) { r.Size = 11 }, "size"},
		{"legacy", func(r *Receipt) { r.Protocol = "legacy" }, "protocol"},
		{"other service", func(r *Receipt) { r.API = "https://elsewhere" }, "publishes to"},
		{"no splat", func(r *Receipt) { r.Splat.ID = "" }, "no splat"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "scan.ply")
			r := good
			tt.edit(&r)
			if err := WriteReceipt(ReceiptPath(file), r); err != nil {
				t.Fatal(err)
			}
			got, why, err := PeerEvidence("", file, "abc", 10, svc)
			if err != nil || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
				t.Fatalf("why %q err %v, want %q", why, err, tt.why)
			}
			if why == "" && got.Splat.ID != "s1" {
				t.Errorf("receipt %+v", got)
			}
		})
	}
	if _, _, err := PeerEvidence("", filepath.Join(t.TempDir(), "none.ply"), "abc", 10, svc); !errors.Is(err, ErrNoReceipt) {
		t.Errorf("no receipt: %v", err)
	}
}

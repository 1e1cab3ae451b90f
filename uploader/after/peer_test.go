package after

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/state"
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
			got, why, err := PeerEvidence(nil, "", file, "abc", 10, svc)
			if err != nil || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
				t.Fatalf("why %q err %v, want %q", why, err, tt.why)
			}
			if why == "" && got.Splat.ID != "s1" {
				t.Errorf("receipt %+v", got)
			}
		})
	}
	if _, _, err := PeerEvidence(nil, "", filepath.Join(t.TempDir(), "none.ply"), "abc", 10, svc); !errors.Is(err, ErrNoReceipt) {
		t.Errorf("no receipt: %v", err)
	}
}

// TestMovedPeerEvidence: with on_success: move, a peer's receipt goes
// along with the file, to where the move put it (the path under the watch
// folder below success_dir, or a numbered name when that one is taken);
// a daemon whose job's file is gone finds it there, by the same checks as
// beside the file. Only what lies inside success_dir is read: a folder
// there replaced by a link to elsewhere, or a receipt that is a link, is
// no evidence.
func TestMovedPeerEvidence(t *testing.T) {
	t.Parallel()
	svc := Service{Protocol: "v1"}
	root, dest := t.TempDir(), t.TempDir()
	mover := New(Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Protocol: "v1"})
	publish := func(sha, splat string) string {
		t.Helper()
		j := afterTestJob(t, root, "rig/scan.ply", state.Done)
		j.Protocol, j.SHA256, j.SplatID = state.ProtocolV1, sha, splat
		movedRec, err := mover.Finish(context.Background(), j)
		moved := movedRec.File
		if err != nil {
			t.Fatal(err)
		}
		return moved
	}
	file := filepath.Join(root, "rig", "scan.ply")
	if _, _, _, err := MovedPeerEvidence(nil, root, file, dest, "abc", 4, svc); !errors.Is(err, ErrNoReceipt) {
		t.Fatalf("nothing moved yet: %v, want ErrNoReceipt", err)
	}
	first := publish("abc", "s1")
	second := publish("def", "s2") // the same name, published again: scan.1.ply
	if want := filepath.Join(dest, "rig", "scan.1.ply"); second != want {
		t.Fatalf("second move to %s, want %s", second, want)
	}
	for _, tt := range []struct {
		sha   string
		size  int64
		splat string // "" when no evidence
		at    string
	}{
		{"abc", 4, "s1", first},
		{"def", 4, "s2", second},
		{"", 4, "s2", second}, // never read: the latest move of its size
		{"abc", 5, "", ""},
		{"xyz", 4, "", ""},
	} {
		r, at, why, err := MovedPeerEvidence(nil, root, file, dest, tt.sha, tt.size, svc)
		switch {
		case err != nil:
			t.Errorf("%s/%d: %v", tt.sha, tt.size, err)
		case tt.splat == "" && why == "":
			t.Errorf("%s/%d: took %s (%s), want no evidence", tt.sha, tt.size, r.Splat.ID, at)
		case tt.splat != "" && (why != "" || r.Splat.ID != tt.splat || at != ReceiptPath(tt.at)):
			t.Errorf("%s/%d: %q at %s (%s), want %s at %s", tt.sha, tt.size, r.Splat.ID, at, why, tt.splat, ReceiptPath(tt.at))
		}
	}
	if _, _, why, err := MovedPeerEvidence(nil, root, file, dest, "abc", 4, Service{Protocol: "legacy"}); err != nil || !strings.Contains(why, "protocol") {
		t.Errorf("another protocol's daemon: why %q, %v", why, err)
	}

	// success_dir/rig replaced by a link to a folder outside holding a
	// receipt that would prove the content: not read.
	outside := t.TempDir()
	if err := WriteReceipt(ReceiptPath(filepath.Join(outside, "scan.ply")),
		Receipt{Size: 4, SHA256: "abc", Status: "done", Protocol: "v1", Splat: ReceiptSplat{ID: "evil"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dest, "rig"), filepath.Join(dest, "rig.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dest, "rig")); err != nil {
		t.Fatal(err)
	}
	if r, _, why, err := MovedPeerEvidence(nil, root, file, dest, "abc", 4, svc); err == nil && why == "" {
		t.Errorf("a folder linked out of success_dir: took %q", r.Splat.ID)
	}
	// A receipt that is itself a link (to one outside): not read either.
	if err := os.Remove(filepath.Join(dest, "rig")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dest, "rig"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ReceiptPath(filepath.Join(outside, "scan.ply")), ReceiptPath(filepath.Join(dest, "rig", "scan.ply"))); err != nil {
		t.Fatal(err)
	}
	if r, _, why, err := MovedPeerEvidence(nil, root, file, dest, "abc", 4, svc); err == nil && why == "" {
		t.Errorf("a receipt linked out of success_dir: took %q", r.Splat.ID)
	}
}

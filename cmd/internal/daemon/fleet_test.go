package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestFleetMembers: each daemon's announcement is read by the others with
// its start's nonce; one not written for fleetStale beside the reader's
// own, anything not named as a member (a link, a folder, another name),
// and a withdrawn one are not members.
func TestFleetMembers(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	roots := func() []string { return []string{root} }
	now := time.Now
	a := newFleet("host-a:/state", roots, now, zerolog.Nop())
	b := newFleet("host-b:/state", roots, now, zerolog.Nop())
	gone := newFleet("host-c:/state", roots, now, zerolog.Nop())
	for _, f := range []*fleet{a, b, gone} {
		f.announce()
	}
	dir := filepath.Join(root, fleetDir)
	old := time.Now().Add(-fleetStale - time.Second)
	if err := os.Chtimes(gone.file(root), old, old); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(outside, []byte("n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "0123456789abcdef"+fleetSuffix)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "fedcba9876543210"+fleetSuffix), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "not-a-member"+fleetSuffix), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := a.Members(root)
	if len(got) != 2 || got[a.self] != a.nonce || got[b.self] != b.nonce {
		t.Fatalf("members %v, want %s=%s and %s=%s", got, a.self, a.nonce, b.self, b.nonce)
	}
	b.withdraw()
	fresh := newFleet("host-a:/state", roots, now, zerolog.Nop()) // no cached read
	if got := fresh.Members(root); len(got) != 1 {
		t.Errorf("after b withdrew: members %v, want a alone", got)
	}
}

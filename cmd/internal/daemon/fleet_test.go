package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestFleetMembers: each daemon's announcement is read by the others with
// its start's nonce, after one beat from the start; one that did not change
// while the reader wrote its own fleetMissed times, anything not named as
// a member (a link, a folder, another name), and a withdrawn one are not
// members.
func TestFleetMembers(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	roots := func() []string { return []string{root} }
	start := time.Now()
	clock := start
	now := func() time.Time { return clock }
	a := newFleet(nil, "host-a:/state", roots, now, zerolog.Nop())
	b := newFleet(nil, "host-b:/state", roots, now, zerolog.Nop())
	gone := newFleet(nil, "host-c:/state", roots, now, zerolog.Nop())
	for _, f := range []*fleet{gone, b, a} {
		f.announce()
	}
	if _, known := a.Members(root); known {
		t.Error("members known at the start, want after one beat")
	}
	dir := filepath.Join(root, fleetDir)
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
	for i := range fleetMissed {
		clock = start.Add(time.Duration(i+1) * fleetBeat)
		stamp := start.Add(time.Duration(i+1) * time.Second) // the file server's clock, not ours
		b.announce()
		if err := os.Chtimes(b.file(root), stamp, stamp); err != nil {
			t.Fatal(err)
		}
		a.announce()
	}
	got, known := a.Members(root)
	if !known || len(got) != 2 || got[a.self] != a.nonce || got[b.self] != b.nonce {
		t.Fatalf("members %v (known %v), want %s=%s and %s=%s", got, known, a.self, a.nonce, b.self, b.nonce)
	}
	b.withdraw()
	clock = clock.Add(fleetReread)
	if got, _ := a.Members(root); len(got) != 1 {
		t.Errorf("after b withdrew: members %v, want a alone", got)
	}
}

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

// TestFleetClients: the pacer's clients are this daemon and the live
// members not announced idle; a member that turns idle is written at once
// between beats (no beat counted), and none are known in the first beat.
func TestFleetClients(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	roots := func() []string { return []string{root} }
	start := time.Now()
	clock := start
	now := func() time.Time { return clock }
	idle := map[string]bool{}
	fleets := make([]*fleet, 3)
	for i, id := range []string{"host-a:/state", "host-b:/state", "host-c:/state"} {
		fleets[i] = newFleet(nil, id, roots, now, zerolog.Nop())
		fleets[i].busy = func() bool { return !idle[id] }
		fleets[i].announce()
	}
	a, b := fleets[0], fleets[1]
	if n := a.clients(); n != 0 {
		t.Errorf("clients in the first beat: %d, want 0 (not known)", n)
	}
	clock = start.Add(fleetBeat)
	a.announce()
	if n := a.clients(); n != 3 {
		t.Errorf("three busy members: clients %d, want 3", n)
	}
	idle["host-b:/state"] = true
	b.between()
	a.between()
	if n := a.clients(); n != 2 {
		t.Errorf("b announced idle: clients %d, want 2", n)
	}
	if got, _ := a.Members(root); len(got) != 3 {
		t.Errorf("an idle member is still a member: %v", got)
	}
	for _, v := range a.read {
		for _, m := range v.members {
			if m.missed != 0 {
				t.Errorf("a write between beats counted a missed beat: %+v", m)
			}
		}
	}
}

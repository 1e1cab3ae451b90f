package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/splatd/splatd/state"
)

// claimAll claims every due job of s, in claim order, releasing none.
func claimAll(t *testing.T, s *Store, clk *clock) []string {
	t.Helper()
	var order []string
	for {
		j, ok, err := s.Claim(clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return order
		}
		order = append(order, j.Path)
	}
}

// TestClaimRendezvous: with an identity, queued jobs are claimed in the
// order of a rendezvous hash of (file key, identity): the same order for
// the same identity whatever the discovery order, a different one for
// another daemon, and the file key is the path under the watch folder, so
// that daemons mounting the shared folder at different paths agree. A job
// that has begun goes before any fresh one.
func TestClaimRendezvous(t *testing.T) {
	t.Parallel()
	const files = 30
	enqueue := func(identity, mount string, reverse bool) (*Store, *clock) {
		clk := newClock()
		s := open(t, t.TempDir(), Options{Now: clk.Now, Identity: identity})
		var cs []Candidate
		for i := range files {
			cs = append(cs, Candidate{Path: fmt.Sprintf("%s/scan-%02d.ply", mount, i), Root: mount, Size: int64(100 + i), ModTime: clk.Now()})
		}
		if reverse {
			slices.Reverse(cs)
		}
		if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
			t.Fatal(err)
		}
		return s, clk
	}
	names := func(paths []string, mount string) []string {
		out := make([]string, len(paths))
		for i, p := range paths {
			out[i] = p[len(mount):]
		}
		return out
	}
	sa, ca := enqueue("host-a:/var/lib/splatd", "/mnt/a", false)
	a := names(claimAll(t, sa, ca), "/mnt/a")
	sa2, ca2 := enqueue("host-a:/var/lib/splatd", "/srv/share", true)
	a2 := names(claimAll(t, sa2, ca2), "/srv/share")
	sb, cb := enqueue("host-b:/var/lib/splatd", "/mnt/a", false)
	b := names(claimAll(t, sb, cb), "/mnt/a")
	if len(a) != files || !slices.Equal(a, a2) {
		t.Fatalf("same identity, other mount and discovery order: %v vs %v", a, a2)
	}
	if slices.Equal(a, b) || a[0] == b[0] {
		t.Errorf("two identities claim in the same order: %v", a)
	}
	// Plain due order without an identity.
	sp, cp := enqueue("", "/mnt/a", false)
	if p := names(claimAll(t, sp, cp), "/mnt/a"); p[0] != "/scan-00.ply" || p[files-1] != "/scan-29.ply" {
		t.Errorf("without identity: %v", p)
	}

	// A job that has begun (here: queued again after an attempt) goes
	// before the fresh ones.
	s, clk := enqueue("host-a:/var/lib/splatd", "/mnt/a", false)
	first, _, _ := s.Claim(clk.Now())
	first.Attempts = 1
	if _, err := s.Commit(first, state.Queued); err != nil {
		t.Fatal(err)
	}
	s.Release(first.ID)
	var last state.Job
	for range 5 {
		last, _, _ = s.Claim(clk.Now())
	}
	s.Release(last.ID)
	last.Attempts = 1
	if _, err := s.Commit(last, state.Queued); err != nil {
		t.Fatal(err)
	}
	if j, _, _ := s.Claim(clk.Now()); j.ID != first.ID && j.ID != last.ID {
		t.Errorf("claimed fresh job %s before a begun one", j.Path)
	}
}

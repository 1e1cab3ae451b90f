package uploader

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/fleet"
)

// testFleet is a fleet of two members, "self" and peer.
type testFleet struct{ peer string }

func (testFleet) Self() string { return "self" }
func (f testFleet) Members(string) (map[string]string, bool) {
	return map[string]string{"self": "", f.peer: "n1"}, true
}

// peerOwning returns a member name that owns j's file against "self".
func peerOwning(t *testing.T, j state.Job) string {
	t.Helper()
	for i := range 1000 {
		m := "peer" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if fleet.Rank(j, m) < fleet.Rank(j, "self") {
			return m
		}
	}
	t.Fatal("no peer name owns the file")
	return ""
}

// testClock is a clock a test moves on.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestShareWaitTakesAPeersOutcomeFromItsReceipt: a file in a live peer's
// share is hashed and parked, with no API call, until the peer's receipt
// gives its outcome (a fleet of five created every file's session five
// times before).
func TestShareWaitTakesAPeersOutcomeFromItsReceipt(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("share.ply", 3)
	e.enqueue(path)
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	var published atomic.Bool
	o := e.v1Options(1)
	o.Now = clock.Now
	members := testFleet{peer: peerOwning(t, e.job(path))}
	o.Peers = fleetPeers{fleet: members, receiptFunc: func(j state.Job) (PeerOutcome, error) {
		if !published.Load() || j.SHA256 == "" {
			return PeerOutcome{}, ErrNoPeerReceipt
		}
		return PeerOutcome{SplatID: "peer-splat", Receipt: j.Path + ".splat.json"}, nil
	}}
	pool := runPool(t, o)
	e.waitFor("the job parked in the peer's share", func() bool {
		clock.add(time.Millisecond)
		j := e.job(path)
		return j.Stage == state.Queued && strings.Contains(j.Parked, "share")
	})
	if st := e.sim.Stats(); st.Creates+st.CreateReplays != 0 {
		t.Fatalf("%d creates while the peer can still publish the file, want 0", st.Creates+st.CreateReplays)
	}
	published.Store(true)
	e.waitFor("the job done from the receipt", func() bool {
		clock.add(100 * time.Millisecond)
		pool.Wake() // its idle wait is on the real clock
		return e.job(path).Stage == state.Done
	})
	j, st := e.job(path), e.sim.Stats()
	if j.SplatID != "peer-splat" || !fleet.FromPeer(j) || st.Creates+st.CreateReplays != 0 {
		t.Errorf("done with splat %q, from peer %v, %d creates; want the receipt's splat and no create", j.SplatID, fleet.FromPeer(j), st.Creates+st.CreateReplays)
	}
}

// TestShareOfASilentPeerTakenOver: a peer that sends no receipt within
// the bound is taken for lost; its file is published here, and the
// session it left uploading is taken over at once, not watched for
// PeerWait (an hour here).
func TestShareOfASilentPeerTakenOver(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("lost.ply", 3)
	e.enqueue(path)
	_, _, _, send := peerSession(t, e.client, path)
	if err := send(1, 2); err != nil {
		t.Fatal(err)
	}
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	o := e.v1Options(1)
	o.Now = clock.Now
	members := testFleet{peer: peerOwning(t, e.job(path))}
	o.Peers = fleetPeers{fleet: members, receiptFunc: func(state.Job) (PeerOutcome, error) { return PeerOutcome{}, ErrNoPeerReceipt }}
	pool := runPool(t, o)
	e.waitFor("the job parked in the peer's share", func() bool {
		clock.add(time.Millisecond)
		return strings.Contains(e.job(path).Parked, "share")
	})
	clock.add(2 * time.Minute) // the fleet's patience before this daemon has gaps between publishes
	e.waitFor("the job done", func() bool {
		clock.add(10 * time.Millisecond)
		pool.Wake() // its idle wait is on the real clock
		return e.job(path).Stage == state.Done
	})
	if j := e.job(path); fleet.FromPeer(j) || j.SplatID == "" {
		t.Errorf("done from peer %v, splat %q; want published here", fleet.FromPeer(j), j.SplatID)
	}
}

package uploader

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/fleet"
)

// TestV1ReadFileGoneToAPeer: a job that hashed its file, and finds it gone
// before its create (a fleet peer published it, then deleted or moved it
// while this daemon was paused or stopped), ends done with the outcome of
// the peer's receipt, with no after-action of its own and no create; with
// no receipt it fails as gone, as before (such jobs failed, and alerted).
func TestV1ReadFileGoneToAPeer(t *testing.T) {
	t.Parallel()
	for _, receipt := range []bool{true, false} {
		e := newV1Env(t, apisim.Options{})
		path := e.writeParts("gone.ply", 2)
		e.enqueue(path)
		e.crashBeforeCreate()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		e.reopen()
		read := e.job(path)
		o := e.v1Options(1)
		var finishes atomic.Int32
		o.After = finishFunc(func(context.Context, state.Job) error { finishes.Add(1); return nil })
		o.Peers = receiptFunc(func(j state.Job) (PeerOutcome, error) {
			if !receipt || j.SHA256 != read.SHA256 {
				return PeerOutcome{}, fs.ErrNotExist
			}
			return PeerOutcome{SplatID: "peer-splat", Receipt: "/published/gone.ply.splat.json"}, nil
		})
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j := e.job(path)
		st := e.sim.Stats()
		switch {
		case read.Stage != state.Ready || read.SHA256 == "":
			t.Fatalf("after the first run: %s sha256 %q, want ready and hashed", read.Stage, read.SHA256)
		case receipt && (j.Stage != state.Done || j.SplatID != "peer-splat" || !fleet.FromPeer(j)):
			t.Errorf("with the peer's receipt: %s splat %q from peer %v (%s)", j.Stage, j.SplatID, fleet.FromPeer(j), j.FailReason)
		case receipt && (finishes.Load() != 0 || st.Creates != 0):
			t.Errorf("with the peer's receipt: %d after-actions, %d creates; want none", finishes.Load(), st.Creates)
		case !receipt && (j.Stage != state.Failed || !strings.Contains(j.FailReason, "file is gone")):
			t.Errorf("without a receipt: %s (%s), want failed as gone", j.Stage, j.FailReason)
		}
	}
}

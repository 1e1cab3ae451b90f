package apisim

import "testing"

// TestV1GenerousVariants: the options that make the simulator friendlier
// than the official schema (a session naming its splat, parts with their
// size) are off by default and do what they say when a test turns them
// on; the client's tests turn them on to check that it uses such fields
// when a deployment sends them.
func TestV1GenerousVariants(t *testing.T) {
	t.Parallel()
	for _, generous := range []bool{false, true} {
		s := newSim(t, Options{SessionSplatID: generous, SessionPartSizes: generous, ProcessingDelay: -1})
		c := newClient(t, s)
		data := plyBytes(1<<20 + 10)
		id := c.publishV1("gen", data)
		got := c.getSession(s.Splats()[0].UploadID)
		if (got.SplatID == id) != generous || (got.SplatID != "") != generous {
			t.Errorf("generous %v: session splatId %q (splat %s)", generous, got.SplatID, id)
		}
		if len(got.UploadedParts) != 2 || (got.UploadedParts[0].Size == 1<<20) != generous || (got.UploadedParts[1].Size == 10) != generous {
			t.Errorf("generous %v: parts %+v", generous, got.UploadedParts)
		}
	}
}

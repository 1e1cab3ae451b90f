package bench

import (
	"context"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// v1PartSizeTorture makes the torture's small samples multi-part: 64 KiB
// parts, so a file of 300 splats (75 KB) has 2 and one of 1,200 has 5.
const v1PartSizeTorture = 64 << 10

// v1Splats mixes single-part and multi-part files: 100 splats (1 part),
// 300 (2 parts) and 1,200 (5 parts).
func v1Splats(i int) int {
	switch i % 4 {
	case 0:
		return 1200
	case 1:
		return 100
	default:
		return 300
	}
}

// runV1Kill: the sigkill scenario under api.protocol v1, with both of the
// server's uncertain answers: 20 % of creates and 30 % of completes commit
// and then answer 502. Files (most of them multi-part) arrive one every
// 400 ms while the daemon is SIGKILLed at random moments and restarted.
// There is no operator step: v1 leaves no uncertain window to excuse, so
// every content must have exactly one splat on the server.
func runV1Kill(ctx context.Context, e *tenv) error {
	so := apisim.Options{PartSize: v1PartSizeTorture, Faults: apisim.Faults{Latency: 30 * time.Millisecond,
		UncertainCreateRate: 0.20, UncertainCompleteRate: 0.30}}
	if err := e.setup(so, DaemonConfig{Protocol: "v1", ParallelParts: 4}); err != nil {
		return err
	}
	files, minKills := e.count(12, 40), e.count(6, 20)
	stop, err := e.arrive(files, v1Splats, 400*time.Millisecond)
	if err != nil {
		return err
	}
	defer stop()
	if err := e.killLoop(ctx, minKills, 20*time.Millisecond, 520*time.Millisecond, time.Now().Add(e.timeout()/2)); err != nil {
		return err
	}
	if err := e.start(); err != nil {
		return err
	}
	if !e.waitFinal(ctx, e.timeout()/2) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished after the last restart", f, files)
	}
	e.verdict()
	e.v1Notes()
	return nil
}

// v1Notes reports what the v1 server saw, and checks that the run was a v1
// run with its faults: no legacy publish, multi-part sessions, and both
// uncertain answers given at least once.
func (e *tenv) v1Notes() {
	st := e.sim.Stats()
	multi := 0
	for _, s := range e.sim.Sessions() {
		if s.ContentLength > s.PartSize {
			multi++
		}
	}
	created502, completed502 := st.Count(apisim.RouteV1CreateUpload, 502), st.Count(apisim.RouteV1Complete, 502)
	e.note("v1: %d sessions (%d multi-part), %d creates + %d replays, %d completes + %d replays, %d splats; "+
		"502 after the commit: %d creates, %d completes; %d part PUTs, %d of a part already held; %d unknown request fields",
		len(e.sim.Sessions()), multi, st.Creates, st.CreateReplays, st.Completes, st.CompleteReplays, st.V1Splats,
		created502, completed502, st.PartPuts, partsResent(st), st.UnknownFields)
	if st.Publishes > 0 {
		e.problem("%d legacy publishes under api.protocol v1", st.Publishes)
	}
	if st.UnknownFields > 0 {
		e.problem("%d v1 requests with a field the schema does not name: %v", st.UnknownFields, st.UnknownFieldNames)
	}
	if multi == 0 {
		e.unproven("no multi-part session: the parts were not exercised")
	}
	if created502 == 0 || completed502 == 0 {
		e.unproven("the uncertain answers did not happen (creates %d, completes %d): the scenario proved nothing", created502, completed502)
	}
}

func partsResent(st apisim.Stats) int {
	n := 0
	for _, s := range st.Sessions {
		n += s.PartsResent
	}
	return n
}

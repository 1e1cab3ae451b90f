package bench

import (
	"context"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// runStrictKill: a backlog of files published under the real strict limit,
// 10 publishes per minute (the publish route in the strict class), while
// the daemon is SIGKILLed at random moments, 1–12 s after each start, and
// restarted. A restart lands in a window whose budget is often spent: the
// daemon must know it (its pacer's windows outlive the process) and wait
// for the reset instead of probing. Target: no 429 at all. The quick run
// shrinks the window to 6 s and the limit to 3.
//
// The protocol is legacy with publish.on_uncertain hold, as in sigkill: a
// kill between a publish and the commit of its answer holds the job, and
// the suite plays the operator (resolveHeld).
func runStrictKill(ctx context.Context, e *tenv) error {
	limit, window := 10, time.Minute
	minDelay, maxDelay := time.Second, 12*time.Second
	if e.o.Quick {
		limit, window = 3, 6*time.Second
		minDelay, maxDelay = 300*time.Millisecond, 2500*time.Millisecond
	}
	so := apisim.Options{Window: window,
		Limits:  map[apisim.Class]int{apisim.ClassStrict: limit},
		Classes: map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict}}
	if err := e.setup(so, DaemonConfig{OnUncertain: "hold"}); err != nil {
		return err
	}
	files, minKills := e.count(12, 40), e.count(6, 20)
	if err := e.writeFiles(0, files, 200); err != nil {
		return err
	}
	// The ingest takes at least (ceil(files/limit) - 1) windows.
	minimum := time.Duration((files+limit-1)/limit-1) * window
	if err := e.killLoop(ctx, minKills, minDelay, maxDelay, time.Now().Add(minimum+window)); err != nil {
		return err
	}
	if err := e.start(); err != nil {
		return err
	}
	if !e.waitFinal(ctx, minimum+2*window) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished after the last restart", f, files)
	}
	if err := e.resolveHeld(ctx, 2*window); err != nil {
		return err
	}
	e.verdict()
	st := e.sim.Stats()
	e.note("strict limit %d per %s on publish: %d publishes answered, %d 429s (target 0)", limit, window, st.Total(apisim.RoutePublish), st.RateLimited)
	if st.RateLimited > 0 {
		e.problem("%d responses 429: a restarted daemon probed a spent window", st.RateLimited)
	}
	return nil
}

package bench

import (
	"context"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// runStrictKill is the strict-sigkill scenario (bench/README.md): a legacy
// backlog under the strict limit, 10 publishes per minute, while the daemon
// is SIGKILLed 1–12 s after each start; the pacer's windows must outlive the
// process. Target: no 429. The suite plays the operator for held jobs
// (resolveHeld), as in sigkill.
func runStrictKill(ctx context.Context, e *tenv) error {
	limit, window := 10, time.Minute
	minDelay, maxDelay := time.Second, 12*time.Second
	if e.o.Quick {
		limit, window = 4, 5*time.Second
		minDelay, maxDelay = 300*time.Millisecond, 2*time.Second
	}
	so := apisim.Options{Window: window,
		Limits:  map[apisim.Class]int{apisim.ClassStrict: limit},
		Classes: map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict}}
	if err := e.setup(so, DaemonConfig{OnUncertain: "hold"}); err != nil {
		return err
	}
	files, minKills := e.count(10, 40), e.count(6, 20)
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
	restarted := time.Now()
	before, _ := e.receipts()
	left := files - before
	if !e.waitFinal(ctx, time.Duration((2*left+limit-1)/limit+2)*window) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished after the last restart", f, files)
	}
	after, _ := e.receipts()
	took := time.Since(restarted)
	e.note("after the last restart: %d more files final in %s (the limit allows %d per %s)", after-before, took.Round(100*time.Millisecond), limit, window)
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

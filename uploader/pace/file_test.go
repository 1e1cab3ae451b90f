package pace

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func readState(t *testing.T, path string) stateFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPacerStateWaitsOutASpentWindowAfterRestart: the process dies with the
// request that spent the window in flight. The file says so before that
// request could leave, and the next process waits for the Reset.
func TestPacerStateWaitsOutASpentWindowAfterRestart(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	srv := newSimServer(clk, 5, 10*time.Second)
	a := newTestPacer(t, clk, Options{StateFile: path})
	mustWait(t, a, routeSigned)(srv.handle())
	for range 3 {
		mustWait(t, a, routeSigned)(srv.handle())
	}
	mustWait(t, a, routePublish) // a class probe: it may be of the same class, and takes the last slot
	f := readState(t, path)
	if len(f.Classes) != 1 || f.Classes[0].Remaining != 0 || f.Routes[routeSigned] != 5 {
		t.Fatalf("state before the last request leaves = %+v, want the window spent", f)
	}
	srv.handle() // the last request reaches the server; the process is killed before the answer

	b := newTestPacer(t, clk, Options{StateFile: path})
	if rt := b.routes[routeSigned]; rt == nil || rt.limit != 5 {
		t.Fatal("the route's class was not loaded")
	}
	delayed := waitAsync(context.Background(), b, routeSigned)
	clk.awaitParked(t, 1)
	mustNotReturn(t, delayed)
	reset := epoch.Add(10 * time.Second)
	if got := clk.Now().Add(clk.lastAsked()); got.Before(reset) {
		t.Fatalf("the new process would send at %v, before the Reset %v", got.Sub(epoch), reset.Sub(epoch))
	}
	clk.AdvanceToNext()
	receive(t, delayed).release(srv.handle())
	if srv.r429 != 0 || srv.ok != 6 {
		t.Errorf("server: %d ok, %d × 429; want 6 and 0", srv.ok, srv.r429)
	}
}

// TestPacerStateStaleRemainingIsConfirmedFirst: the counts within a window
// are not written, so a crash leaves the file showing more than the server
// has. The next process sends one request, and goes on from its answer.
func TestPacerStateStaleRemainingIsConfirmedFirst(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	srv := newSimServer(clk, 5, 10*time.Second)
	a := newTestPacer(t, clk, Options{StateFile: path})
	// Three requests: the first names the route's class and the window, so
	// the file has them; the next two change only the count.
	mustWait(t, a, routeSigned)(srv.handle())
	for range 2 {
		mustWait(t, a, routeSigned)(srv.handle())
	}
	if got := readState(t, path).Classes[0].Remaining; got != 4 {
		t.Fatalf("file remaining = %d, want 4 (behind by two)", got)
	}

	b := newTestPacer(t, clk, Options{StateFile: path})
	first := mustWait(t, b, routeSigned)
	second := waitAsync(context.Background(), b, routeSigned)
	clk.awaitParked(t, 1)
	mustNotReturn(t, second) // one at a time until the window is confirmed
	first(srv.handle())      // the server has 1 left
	receive(t, second).release(srv.handle())
	third := waitAsync(context.Background(), b, routeSigned)
	clk.awaitParked(t, 1)
	mustNotReturn(t, third)
	clk.AdvanceToNext()
	receive(t, third).release(srv.handle())
	if srv.r429 != 0 {
		t.Errorf("server answered %d × 429", srv.r429)
	}
}

// TestPacerStateKeepsA429Wait: a delay is written as soon as the 429 is read.
func TestPacerStateKeepsA429Wait(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	a := newTestPacer(t, clk, Options{StateFile: path})
	t0 := clk.Now()
	resp := windowResp(429, 10, 0, time.Time{}, t0, 30*time.Second)
	resp.Remaining = -1 // no window, only the delay
	mustWait(t, a, routePublish)(resp)

	b := newTestPacer(t, clk, Options{StateFile: path})
	delayed := waitAsync(context.Background(), b, routePublish)
	clk.awaitParked(t, 1)
	if got, want := clk.lastAsked(), 30*time.Second+DefaultJitter/2; got != want {
		t.Fatalf("delay after the restart = %v, want %v", got, want)
	}
	clk.AdvanceToNext()
	receive(t, delayed).release(nil)
}

// TestPacerStateIgnoresWhatIsOver: a window whose Reset has passed is not
// loaded (the next request probes), and an unreadable file is ignored.
func TestPacerStateIgnoresWhatIsOver(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "pacer.json")
	a := newTestPacer(t, clk, Options{StateFile: path})
	t0 := clk.Now()
	mustWait(t, a, routePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, 0))
	clk.Advance(time.Minute + time.Second)

	b := newTestPacer(t, clk, Options{StateFile: path})
	mustWait(t, b, routePublish)(nil) // at once: the window is over
	if bk := b.routes[routePublish]; !bk.resetAt.IsZero() || bk.limit != 10 {
		t.Errorf("loaded class reset at %v, limit %d; want an unknown window of limit 10", bk.resetAt, bk.limit)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	c := newTestPacer(t, clk, Options{StateFile: bad, Logger: zerolog.New(&logs)})
	mustWait(t, c, routePublish)(nil)
	if !logs.contains([]byte("ignoring the saved rate-limit state")) {
		t.Errorf("an unreadable state file was not logged: %s", logs.String())
	}
}

// BenchmarkPacerRelease measures the hot path, one Wait and its release, on
// a class with plenty left, the fake clock 100 ms further at each request (a
// busy normal class is 4 per second), without a state file and with one
// (written at each new window: once a minute here).
func BenchmarkPacerRelease(b *testing.B) {
	for _, file := range []bool{false, true} {
		b.Run(map[bool]string{false: "no_state_file", true: "state_file"}[file], func(b *testing.B) {
			clk := newFakeClock()
			o := Options{Now: clk.Now, Timer: clk.Timer, Rand: func() float64 { return 0.5 }}
			if file {
				o.StateFile = filepath.Join(b.TempDir(), "pacer.json")
			}
			p := New(o)
			// A fixed-window server with room for every request of a
			// window: 600 at 100 ms apart.
			const limit = 1000
			left, reset := limit, time.Time{}
			b.ReportAllocs()
			for b.Loop() {
				clk.Advance(100 * time.Millisecond)
				rel, err := p.Wait(context.Background(), routeGet, isRead(routeGet))
				if err != nil {
					b.Fatal(err)
				}
				now := clk.Now()
				if !now.Before(reset) {
					left, reset = limit, now.Truncate(time.Minute).Add(time.Minute)
				}
				left--
				rel(windowResp(200, limit, left, reset, now, 0))
			}
		})
	}
}

// restartRun lets a pacer with a state file send k requests of a fresh
// window of 5 per 10 s, the last one reaching the server as the process is
// killed (no answer), then starts a new pacer from the file and publishes 3
// files with 2 workers. It returns the new pacer's requests that reached the
// server before the window's Reset, and the 429s in all.
func restartRun(tb testing.TB, k int) (beforeReset, r429 int) {
	clk := newFakeClock()
	path := filepath.Join(tb.TempDir(), "pacer.json")
	srv := newSimServer(clk, 5, 10*time.Second)
	o := Options{Now: clk.Now, Timer: clk.Timer, Rand: seededRand(uint64(k)), StateFile: path}
	a := New(o)
	tb.Cleanup(func() { _ = a.Flush() }) // let a write behind end before the directory goes
	for i := range k {
		rel, err := a.Wait(context.Background(), routeSigned, isRead(routeSigned))
		if err != nil {
			tb.Fatal(err)
		}
		resp := srv.handle()
		if i < k-1 {
			rel(resp)
		}
	}
	first := len(srv.sentAt)
	b := New(o)
	tb.Cleanup(func() { _ = b.Flush() })
	drive(tb, clk, 2, publishFiles(tb, b, srv, 2, 3))
	reset := epoch.Add(10 * time.Second)
	for _, at := range srv.sentAt[first:] {
		if at.Before(reset) {
			beforeReset++
		}
	}
	return beforeReset, srv.r429
}

// TestPacerStateRestartAtEveryPoint kills the first pacer after each of the
// window's 5 requests: the new pacer never draws a 429, and after a spent
// window sends nothing before its Reset.
func TestPacerStateRestartAtEveryPoint(t *testing.T) {
	t.Parallel()
	for k := 1; k <= 5; k++ {
		before, r429 := restartRun(t, k)
		if r429 != 0 {
			t.Errorf("killed after %d requests: %d × 429", k, r429)
		}
		if before > 5-k {
			t.Errorf("killed after %d requests: %d sent before the Reset, at most %d left", k, before, 5-k)
		}
	}
}

// BenchmarkPacerStateWrite is the cost of one write of a two-class state
// file: behind (temp file + rename) and durable (with the file's and the
// directory's fsync), as done for a spent window or a 429 delay.
func BenchmarkPacerStateWrite(b *testing.B) {
	clk := newFakeClock()
	p := New(Options{Now: clk.Now, Timer: clk.Timer, StateFile: filepath.Join(b.TempDir(), "pacer.json")})
	t0 := clk.Now()
	mustWaitB := func(route string, resp *Answer) {
		rel, err := p.Wait(context.Background(), route, isRead(route))
		if err != nil {
			b.Fatal(err)
		}
		rel(resp)
	}
	mustWaitB(routePublish, windowResp(200, 10, 9, t0.Add(time.Minute), t0, 0))
	mustWaitB(routeGet, windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))
	_ = p.Flush()
	for b.Loop() {
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPacerFigures prints issue 12's pacing figures on the fake clock
// against a fixed-window server (5 per 10 s, 2 workers, a signed URL and a
// publish per file, default jitter): the worst ratio of finish time to the
// minimum the limit allows over 5 seeds, for 20 and 30 files, with our 429s;
// and the restart scenario (killed after each of a window's 5 requests, the
// last in flight): requests sent before the Reset of the spent window, 429s.
//
//	go test -run '^$' -bench PacerFigures -benchtime 1x ./uploader/api/
func BenchmarkPacerFigures(b *testing.B) {
	for b.Loop() {
		for _, files := range []int{20, 30} {
			worst, r429 := 0.0, 0
			for seed := range uint64(5) {
				srv, ratio := pacingRun(b, files, 2, 5, 10*time.Second, seed+1)
				worst, r429 = max(worst, ratio), r429+srv.r429
			}
			b.ReportMetric(worst, fmt.Sprintf("ratio_%d_files", files))
			b.ReportMetric(float64(r429), fmt.Sprintf("own_429s_%d_files", files))
		}
		spent, r429 := 0, 0
		for k := 1; k <= 5; k++ {
			before, n := restartRun(b, k)
			if k == 5 {
				spent += before
			}
			r429 += n
		}
		b.ReportMetric(float64(spent), "restart_sent_before_reset")
		b.ReportMetric(float64(r429), "restart_429s")
	}
}

// TestPacerStatePollKnownAfterRestart: a route's class, once learned, is
// known from the first request after a restart. The batch's last publishes
// spent the strict window; the restarted daemon's first poll (a normal-class
// read route) goes at once, in its own class only (not as a probe that could
// be in the strict one), and a publish still waits for the strict Reset.
func TestPacerStatePollKnownAfterRestart(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	a := newTestPacer(t, clk, Options{StateFile: path})
	t0 := clk.Now()
	mustWait(t, a, routeGet)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))
	mustWait(t, a, routePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, 0)) // spent: written at once

	b := newTestPacer(t, clk, Options{StateFile: path})
	poll := mustWait(t, b, routeGet)
	if n, strict := clk.askedCount(), b.classes[10]; n != 0 || len(b.probes) != 0 || strict.inFlight != 0 {
		t.Fatalf("the restarted daemon's first poll: %d waits, %d probes, %d in flight in the strict class; want 0, 0, 0",
			n, len(b.probes), strict.inFlight)
	}
	poll(windowResp(200, 240, 230, t0.Add(time.Minute), t0, 0))
	delayed := waitAsync(context.Background(), b, routePublish)
	clk.awaitParked(t, 1)
	mustNotReturn(t, delayed)
	if got := clk.Now().Add(clk.lastAsked()); got.Before(t0.Add(time.Minute)) {
		t.Fatalf("a publish after the restart would leave at %v, before the strict Reset", got.Sub(t0))
	}
	clk.AdvanceToNext()
	receive(t, delayed).release(nil)
}

// TestPacerStateWritesWhatARestartNeeds: an answer that names a route's
// class or a new window is on disk when its release returns (a SIGKILL
// right after it loses neither), a count within the window is not (no
// write per request), and Flush writes the rest.
func TestPacerStateWritesWhatARestartNeeds(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	p := newTestPacer(t, clk, Options{StateFile: path})
	t0 := clk.Now()
	mustWait(t, p, routeGet)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))
	if f := readState(t, path); f.Routes[routeGet] != 240 || len(f.Classes) != 1 || f.Classes[0].Reset != t0.Add(time.Minute).Unix() {
		t.Fatalf("after a route's first answer: %+v, want its class and window", f)
	}
	mustWait(t, p, routeGet)(windowResp(200, 240, 238, t0.Add(time.Minute), t0, 0))
	if f := readState(t, path); f.Classes[0].Remaining != 239 {
		t.Errorf("a count within the window was written: remaining %d, want 239", f.Classes[0].Remaining)
	}
	clk.Advance(time.Minute)
	t1 := clk.Now()
	mustWait(t, p, routeCheckpoints)(windowResp(200, 240, 237, t1.Add(time.Minute), t1, 0))
	if f := readState(t, path); f.Routes[routeCheckpoints] != 240 || f.Classes[0].Reset != t1.Add(time.Minute).Unix() {
		t.Errorf("after a new route's answer in a new window: %+v, want both", f)
	}
	mustWait(t, p, routeGet)(windowResp(200, 240, 236, t1.Add(time.Minute), t1, 0))
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if f := readState(t, path); f.Classes[0].Remaining != 236 {
		t.Errorf("after Flush: remaining %d, want 236", f.Classes[0].Remaining)
	}
}

// TestPacerStateLoadsTheLayoutBefore: a pacer.json written before the
// layout's version 2 (with own and hold_until) still holds a spent window
// after the upgrade's restart: the new pacer waits for its Reset instead of
// probing it.
func TestPacerStateLoadsTheLayoutBefore(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	t0 := clk.Now()
	v1 := fmt.Sprintf(`{"version":1,"written":%q,"classes":[{"limit":5,"remaining":0,"reset":%d,"reset_at":%q,"own":5,"foreign":0,"expect":0}],"routes":{"publish":5}}`,
		t0.Format(time.RFC3339Nano), t0.Add(10*time.Second).Unix(), t0.Add(10*time.Second).Format(time.RFC3339Nano))
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newTestPacer(t, clk, Options{StateFile: path})
	mustDelayFor(t, clk, p, routePublish, 10*time.Second, "the first publish after the upgrade (until the saved Reset)")
}

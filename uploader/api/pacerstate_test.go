package api

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func readState(t *testing.T, path string) pacerFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f pacerFile
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
	a := newTestPacer(t, clk, PacerOptions{StateFile: path})
	for range 4 {
		mustWait(t, a, RouteSignedURL)(srv.handle())
	}
	mustWait(t, a, RoutePublish) // a class probe: it may be of the same class, and takes the last slot
	f := readState(t, path)
	if len(f.Classes) != 1 || f.Classes[0].Remaining != 0 || f.Routes[RouteSignedURL] != 5 {
		t.Fatalf("state before the last request leaves = %+v, want the window spent", f)
	}
	srv.handle() // the last request reaches the server; the process is killed before the answer

	b := newTestPacer(t, clk, PacerOptions{StateFile: path})
	if rt := b.routes[RouteSignedURL]; rt == nil || rt.bucket == nil || rt.bucket.limit != 5 {
		t.Fatal("the route's class was not loaded")
	}
	held := waitAsync(context.Background(), b, RouteSignedURL)
	clk.awaitParked(t, 1)
	mustNotReturn(t, held)
	reset := epoch.Add(10 * time.Second)
	if got := clk.Now().Add(clk.lastAsked()); got.Before(reset) {
		t.Fatalf("the new process would send at %v, before the Reset %v", got.Sub(epoch), reset.Sub(epoch))
	}
	clk.AdvanceToNext()
	receive(t, held).release(srv.handle())
	if srv.r429 != 0 || srv.ok != 6 {
		t.Errorf("server: %d ok, %d × 429; want 6 and 0", srv.ok, srv.r429)
	}
}

// TestPacerStateStaleRemainingIsConfirmedFirst: ordinary decrements are
// written behind, so a crash can leave the file showing more than the
// server has. The next process sends one request, and goes on from its
// answer.
func TestPacerStateStaleRemainingIsConfirmedFirst(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	srv := newSimServer(clk, 5, 10*time.Second)
	a := newTestPacer(t, clk, PacerOptions{StateFile: path, PersistInterval: time.Hour})
	for range 3 { // written after the first only
		mustWait(t, a, RouteSignedURL)(srv.handle())
	}
	if got := readState(t, path).Classes[0].Remaining; got != 4 {
		t.Fatalf("file remaining = %d, want 4 (behind by two)", got)
	}

	b := newTestPacer(t, clk, PacerOptions{StateFile: path})
	first := mustWait(t, b, RouteSignedURL)
	second := waitAsync(context.Background(), b, RouteSignedURL)
	clk.awaitParked(t, 1)
	mustNotReturn(t, second) // one at a time until the window is confirmed
	first(srv.handle())      // the server has 1 left
	receive(t, second).release(srv.handle())
	third := waitAsync(context.Background(), b, RouteSignedURL)
	clk.awaitParked(t, 1)
	mustNotReturn(t, third)
	clk.AdvanceToNext()
	receive(t, third).release(srv.handle())
	if srv.r429 != 0 {
		t.Errorf("server answered %d × 429", srv.r429)
	}
}

// TestPacerStateKeepsA429Hold: a hold is written as soon as the 429 is read.
func TestPacerStateKeepsA429Hold(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "pacer.json")
	a := newTestPacer(t, clk, PacerOptions{StateFile: path, PersistInterval: time.Hour})
	t0 := clk.Now()
	resp := windowResp(http.StatusTooManyRequests, 10, 0, time.Time{}, t0, "30")
	resp.Header.Del("X-RateLimit-Remaining") // no window, only the hold
	mustWait(t, a, RoutePublish)(resp)

	b := newTestPacer(t, clk, PacerOptions{StateFile: path})
	held := waitAsync(context.Background(), b, RoutePublish)
	clk.awaitParked(t, 1)
	if got, want := clk.lastAsked(), 30*time.Second+500*time.Millisecond; got != want {
		t.Fatalf("hold after the restart = %v, want %v", got, want)
	}
	clk.AdvanceToNext()
	receive(t, held).release(nil)
}

// TestPacerStateIgnoresWhatIsOver: a window whose Reset has passed is not
// loaded (the next request probes), and an unreadable file is ignored.
func TestPacerStateIgnoresWhatIsOver(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "pacer.json")
	a := newTestPacer(t, clk, PacerOptions{StateFile: path})
	t0 := clk.Now()
	mustWait(t, a, RoutePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, ""))
	clk.Advance(time.Minute + time.Second)

	b := newTestPacer(t, clk, PacerOptions{StateFile: path})
	mustWait(t, b, RoutePublish)(nil) // at once: the window is over
	if bk := b.routes[RoutePublish].bucket; bk.known || bk.limit != 10 {
		t.Errorf("loaded bucket known=%v limit=%d, want an unknown window of limit 10", bk.known, bk.limit)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	c := newTestPacer(t, clk, PacerOptions{StateFile: bad, Logger: zerolog.New(&logs)})
	mustWait(t, c, RoutePublish)(nil)
	if !logs.contains([]byte("ignoring the saved rate-limit state")) {
		t.Errorf("an unreadable state file was not logged: %s", logs.String())
	}
}

// BenchmarkPacerRelease measures the hot path, one Wait and its release, on
// a class with plenty left, the fake clock 100 ms further at each request (a
// busy normal class is 4 per second): without a state file, with one
// (written behind at most every 500 ms), and writing at every release.
func BenchmarkPacerRelease(b *testing.B) {
	for _, bc := range []struct {
		name     string
		file     bool
		interval time.Duration
	}{
		{"no_state_file", false, 0},
		{"state_file", true, 0},
		{"state_file_every_release", true, -1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clk := newFakeClock()
			o := PacerOptions{Now: clk.Now, Timer: clk.Timer, Rand: func() float64 { return 0.5 }, PersistInterval: bc.interval}
			if bc.file {
				o.StateFile = filepath.Join(b.TempDir(), "pacer.json")
			}
			p := NewPacer(o)
			ctx := context.Background()
			const limit = 1 << 30
			left := limit
			b.ReportAllocs()
			for b.Loop() {
				clk.Advance(100 * time.Millisecond)
				rel, err := p.Wait(ctx, RouteGetSplat)
				if err != nil {
					b.Fatal(err)
				}
				now := clk.Now()
				left--
				rel(windowResp(200, limit, left, now.Truncate(time.Minute).Add(time.Minute), now, ""))
			}
		})
	}
}

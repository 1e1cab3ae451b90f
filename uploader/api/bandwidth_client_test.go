package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// autoClock is a fake clock whose timers fire at once, moving the clock to
// their deadline: one stream through a limiter then runs in no real time
// and its fake elapsed time is what the limit imposed.
type autoClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *autoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *autoClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch, func() bool { return false }
}

// sinkStorage is a loopback object store that reads and discards bodies and
// answers with an ETag (for v1 part PUTs).
func sinkStorage(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"e"`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func limitedClient(t testing.TB, l *Limiter) *Client {
	t.Helper()
	c, err := NewClient(ClientOptions{BaseURL: "https://api.invalid", Token: testToken, UserAgent: "splatd-test", Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every storage PUT body, legacy Put and v1 PutPart, goes through the
// client's limiter.
func TestClientPutsGoThroughLimiter(t *testing.T) {
	t.Parallel()
	clk := &autoClock{now: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	l := NewLimiter(Schedule{}, LimiterOptions{Now: clk.Now, NewTimer: clk.NewTimer})
	c := limitedClient(t, l)
	if c.Limiter() != l {
		t.Fatal("Client.Limiter does not return the limiter it was given")
	}
	storage := sinkStorage(t)
	const size = 3 << 20
	ctx := context.Background()
	if err := c.Put(ctx, storage.URL+"/k?sig=s", io.LimitReader(bwZeros{}, size), size, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutPart(ctx, storage.URL+"/k?part=1", io.LimitReader(bwZeros{}, size), size, nil); err != nil {
		t.Fatal(err)
	}
	// The clock stands still, so the meter's window holds both bodies.
	if got := l.ObservedRate(); got != 2*size {
		t.Fatalf("limiter saw %d bytes, want %d (both PUT bodies)", got, 2*size)
	}
}

// A limited PUT takes the time the limit imposes (on a fake clock), and a
// new schedule applies to the next one.
func TestClientPutFollowsLimit(t *testing.T) {
	t.Parallel()
	clk := &autoClock{now: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	l := NewLimiter(bwMustParse(t, "1MiB/s"), LimiterOptions{Now: clk.Now, NewTimer: clk.NewTimer})
	c := limitedClient(t, l)
	storage := sinkStorage(t)
	put := func(size int64) time.Duration {
		t.Helper()
		start := clk.Now()
		if err := c.Put(context.Background(), storage.URL+"/k?sig=s", io.LimitReader(bwZeros{}, size), size, nil); err != nil {
			t.Fatal(err)
		}
		return clk.Now().Sub(start)
	}
	// 4 MiB at 1 MiB/s: 4 s, less the burst an idle bucket may hold (none
	// for a new limiter), plus at most one chunk's rounding.
	if got := put(4 << 20); got < 3900*time.Millisecond || got > 4100*time.Millisecond {
		t.Errorf("4 MiB at 1 MiB/s took %v of fake time, want about 4 s", got)
	}
	l.SetSchedule(bwMustParse(t, "4MiB/s"))
	if got := put(4 << 20); got < 900*time.Millisecond || got > 1100*time.Millisecond {
		t.Errorf("4 MiB at 4 MiB/s took %v of fake time, want about 1 s", got)
	}
}

// BenchmarkClientPutBandwidth measures the aggregate rate of 4 concurrent
// uploads through the real client, on loopback, under one shared limit, as
// a ratio to the limit (target 0.9..1.1). It runs in real time: about 4 s
// per iteration.
//
//	go test -run '^$' -bench ClientPutBandwidth -benchtime 3x ./uploader/api/
func BenchmarkClientPutBandwidth(b *testing.B) {
	const (
		streams = 4
		rate    = 8 << 20 // bytes per second
		each    = 8 << 20 // bytes per upload: 4 s in all
	)
	sched, err := ParseBandwidth("8MiB/s")
	if err != nil {
		b.Fatal(err)
	}
	storage := sinkStorage(b)
	var ratios []float64
	for b.Loop() {
		c := limitedClient(b, NewLimiter(sched, LimiterOptions{}))
		start := time.Now()
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				if err := c.Put(context.Background(), storage.URL+"/k?sig=s", io.LimitReader(bwZeros{}, each), each, nil); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		got := float64(streams*each) / time.Since(start).Seconds()
		ratios = append(ratios, got/rate)
	}
	var sum float64
	for _, r := range ratios {
		sum += r
	}
	b.ReportMetric(sum/float64(len(ratios)), "rate/limit")
	b.ReportMetric(0, "ns/op")
}

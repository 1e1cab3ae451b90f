package metrics

import (
	"sync"
	"time"
)

// throughputMinutes is the span of the page's sparkline.
const throughputMinutes = 60

// Throughput counts the bytes sent to storage per minute over the last
// hour, and since local midnight (or since it started, if later).
type Throughput struct {
	mu      sync.Mutex
	minutes [throughputMinutes]int64
	last    int64 // the minute (Unix minutes) of the newest bucket
	day     time.Time
	today   int64
	started time.Time
}

// Add counts n bytes sent at now.
func (t *Throughput) Add(now time.Time, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.minutes[t.last%throughputMinutes] += n
	t.today += n
}

// advance moves the buckets and the day to now; t.mu is held.
func (t *Throughput) advance(now time.Time) {
	if t.started.IsZero() {
		t.started = now
	}
	m := now.Unix() / 60
	if t.last == 0 || m-t.last >= throughputMinutes {
		t.minutes = [throughputMinutes]int64{}
	} else {
		for i := t.last + 1; i <= m; i++ {
			t.minutes[i%throughputMinutes] = 0
		}
	}
	if m > t.last {
		t.last = m
	}
	y, mo, d := now.Date()
	if day := time.Date(y, mo, d, 0, 0, 0, 0, now.Location()); !day.Equal(t.day) {
		t.day, t.today = day, 0
	}
}

// Read returns the bytes of each of the last 60 minutes (oldest first, the
// current one last), the bytes sent today and since when they count.
func (t *Throughput) Read(now time.Time) (minutes []int64, today int64, since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	minutes = make([]int64, throughputMinutes)
	for i := range throughputMinutes {
		minutes[i] = t.minutes[(t.last-throughputMinutes+1+int64(i))%throughputMinutes]
	}
	since = t.day
	if t.started.After(since) {
		since = t.started
	}
	return minutes, t.today, since
}

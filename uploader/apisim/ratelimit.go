package apisim

import (
	"time"
)

// limiter keeps one fixed window per (token, class). Windows start at the
// whole second of the first request after the previous window ended and
// last Window rounded up to whole seconds, so the window's end is exactly
// the epoch second advertised in X-RateLimit-Reset: a client that waits
// until Reset always finds a fresh window. It is guarded by Server.mu.
type limiter struct {
	window  time.Duration
	limits  map[Class]int
	buckets map[bucketKey]*bucket
}

type bucketKey struct {
	token string
	class Class
}

type bucket struct {
	end   time.Time
	count int
}

// quota is what one request learned from the limiter.
type quota struct {
	limit     int
	remaining int
	reset     time.Time // window end, a whole second
	ok        bool
}

func newLimiter(window time.Duration, limits map[Class]int) *limiter {
	return &limiter{window: window, limits: limits, buckets: map[bucketKey]*bucket{}}
}

// current returns the bucket for key at now, opening a new window (charged
// with the neighbour's share) when the previous one has ended.
func (l *limiter) current(now time.Time, key bucketKey, neighbour int) *bucket {
	b := l.buckets[key]
	if b == nil {
		b = &bucket{}
		l.buckets[key] = b
	}
	if !now.Before(b.end) {
		start := now.Truncate(time.Second)
		end := start.Add(l.window)
		if t := end.Truncate(time.Second); !t.Equal(end) {
			end = t.Add(time.Second)
		}
		b.end = end
		b.count = min(max(neighbour, 0), l.limits[key.class])
	}
	return b
}

// take charges one request. force429 refuses it without charging (a server
// that is shedding load); count=false reports the quota without charging
// (used for 401 answers).
func (l *limiter) take(now time.Time, key bucketKey, neighbour int, force429, charge bool) quota {
	limit := l.limits[key.class]
	b := l.current(now, key, neighbour)
	q := quota{limit: limit, reset: b.end}
	switch {
	case force429 || b.count >= limit:
		q.ok = false
	default:
		q.ok = true
		if charge {
			b.count++
		}
	}
	q.remaining = max(limit-b.count, 0)
	if !q.ok {
		q.remaining = 0
	}
	return q
}

// consume charges n requests of a neighbour to key's current window.
func (l *limiter) consume(now time.Time, key bucketKey, n int) {
	b := l.current(now, key, 0)
	b.count = min(b.count+n, l.limits[key.class])
}

package uploader

import (
	"testing"
	"time"
)

// TestProgressRateAndETA: the rate is measured over the recent window
// with the pool's clock, follows a change of pace, falls to 0 while
// nothing is sent, and gives the ETA of the rest.
func TestProgressRateAndETA(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &Pool{o: PoolOptions{Now: func() time.Time { return now }}, progress: map[uint64]*progressEntry{}}
	const size = 100 << 20
	sent := int64(0)
	step := func(d time.Duration, bytes int64) {
		for range int(d / (100 * time.Millisecond)) {
			now = now.Add(100 * time.Millisecond)
			sent += bytes / int64(d/(100*time.Millisecond))
			p.setProgress(7, &Progress{Path: "/x.ply", Sent: sent, Size: size})
		}
	}
	p.setProgress(7, &Progress{Path: "/x.ply", Size: size})
	start := now
	step(10*time.Second, 10<<20) // 1 MiB/s
	pr := p.Progress()[7]
	if pr.Rate < 0.95*(1<<20) || pr.Rate > 1.05*(1<<20) {
		t.Errorf("rate at 1 MiB/s = %.0f B/s", pr.Rate)
	}
	if want := time.Duration(float64(size-sent) / pr.Rate * float64(time.Second)); pr.ETA != want || pr.ETA < 80*time.Second {
		t.Errorf("ETA = %v, want %v (90 MiB at 1 MiB/s)", pr.ETA, want)
	}
	if !pr.Started.Equal(start) || pr.Sent != sent {
		t.Errorf("progress %+v: want started %v, sent %d", pr, start, sent)
	}
	step(10*time.Second, 40<<20) // 4 MiB/s: the window forgets the old pace
	if pr := p.Progress()[7]; pr.Rate < 3.8*(1<<20) || pr.Rate > 4.2*(1<<20) {
		t.Errorf("rate after the change to 4 MiB/s = %.0f B/s", pr.Rate)
	}
	now = now.Add(time.Minute) // stalled: nothing sent
	if pr := p.Progress()[7]; pr.Rate != 0 || pr.ETA != 0 {
		t.Errorf("stalled upload: rate %.0f, ETA %v; want 0, 0 (unknown)", pr.Rate, pr.ETA)
	}
	p.setProgress(7, nil)
	if _, ok := p.Progress()[7]; ok {
		t.Error("ended upload still listed")
	}
}

package meter

import (
	"errors"
	"testing"
	"time"
)

// The steps of a check, as the pool names them.
const (
	hashing  = "hashing"
	encoding = "encoding"
)

// TestProgressRateAndETA: the rate is measured over the recent window
// with the board's clock, follows a change of pace, falls to 0 while
// nothing is sent, and gives the ETA of the rest.
func TestProgressRateAndETA(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := New(func() time.Time { return now })
	const size = 100 << 20
	sent := int64(0)
	step := func(d time.Duration, bytes int64) {
		for range int(d / (100 * time.Millisecond)) {
			now = now.Add(100 * time.Millisecond)
			sent += bytes / int64(d/(100*time.Millisecond))
			b.Upload(7, &Progress{Path: "/x.ply", Sent: sent, Size: size})
		}
	}
	b.Upload(7, &Progress{Path: "/x.ply", Size: size})
	start := now
	step(10*time.Second, 10<<20) // 1 MiB/s
	pr := b.Uploads()[7]
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
	if pr := b.Uploads()[7]; pr.Rate < 3.8*(1<<20) || pr.Rate > 4.2*(1<<20) {
		t.Errorf("rate after the change to 4 MiB/s = %.0f B/s", pr.Rate)
	}
	now = now.Add(time.Minute) // stalled: nothing sent
	if pr := b.Uploads()[7]; pr.Rate != 0 || pr.ETA != 0 {
		t.Errorf("stalled upload: rate %.0f, ETA %v; want 0, 0 (unknown)", pr.Rate, pr.ETA)
	}
	b.Upload(7, nil)
	if _, ok := b.Uploads()[7]; ok {
		t.Error("ended upload still listed")
	}
}

// TestCheckMeterRateAndETA: a check's meter counts the bytes written to it
// at once (an atomic counter, read by Checks), samples the rate with
// the pool's clock at most every rateSample, gives the ETA of the rest as
// an upload's, and its entry is gone once stopped.
func TestCheckMeterRateAndETA(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := New(func() time.Time { return now })
	const size = 100 << 20
	m := b.StartCheck(7, "/x.ply", hashing, size, nil)
	chunk := make([]byte, 1<<20)
	for range 100 { // 10 s of 100 KiB every 100 ms: about 1 MiB/s
		now = now.Add(100 * time.Millisecond)
		if _, err := m.Write(chunk[:100<<10]); err != nil {
			t.Fatal(err)
		}
	}
	pr := b.Checks()[7]
	if pr.Step != hashing || pr.Path != "/x.ply" || pr.Size != size || pr.Sent != 100*100<<10 {
		t.Errorf("progress %+v: want hashing /x.ply, %d of %d bytes", pr, 100*100<<10, size)
	}
	if pr.Rate < 0.95*(1<<20) || pr.Rate > 1.05*(1<<20) {
		t.Errorf("rate at 1 MiB/s = %.0f B/s", pr.Rate)
	}
	if want := time.Duration(float64(size-pr.Sent) / pr.Rate * float64(time.Second)); pr.ETA != want {
		t.Errorf("ETA = %v, want %v", pr.ETA, want)
	}
	// Between two samples the bytes count at once; the rate waits for the
	// next sample.
	if _, err := m.Write(chunk); err != nil {
		t.Fatal(err)
	}
	if got := b.Checks()[7].Sent; got != 100*100<<10+1<<20 {
		t.Errorf("sent %d right after a write, want %d", got, 100*100<<10+1<<20)
	}
	if _, ok := b.Uploads()[7]; ok {
		t.Error("a check is listed as an upload")
	}
	m.Stop()
	if _, ok := b.Checks()[7]; ok {
		t.Error("ended check still listed")
	}
}

// TestEncodeProgressOverPasses: the encoder's progress (sog.Options.Progress)
// shows on the job's check as the bytes of all its passes over their
// total, with a rate once time passes, as a hash's does.
func TestEncodeProgressOverPasses(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	b := New(func() time.Time { return now })
	m := b.StartCheck(7, "/x.ply", encoding, 10, nil)
	m.Encoded(0, 40) // four passes over a 10-byte PLY
	now = now.Add(time.Second)
	m.Encoded(25, 40)
	pr := b.Checks()[7]
	if pr.Step != encoding || pr.Sent != 25 || pr.Size != 40 || pr.Rate <= 0 || pr.ETA <= 0 {
		t.Errorf("mid-encoding: %+v, want encoding, 25 of 40, a rate and an ETA", pr)
	}
	m.Stop()
}

// TestCheckHookEndsWrite: a hook's error ends the Write after the chunk
// was counted.
func TestCheckHookEndsWrite(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := New(func() time.Time { return now })
	stop := errors.New("crash")
	m := b.StartCheck(7, "/x.ply", hashing, 10, func() error { return stop })
	if n, err := m.Write(make([]byte, 4)); n != 0 || !errors.Is(err, stop) {
		t.Errorf("Write = %d, %v; want 0, the hook's error", n, err)
	}
	if got := b.Checks()[7].Sent; got != 4 {
		t.Errorf("sent %d, want the chunk counted (4)", got)
	}
	m.Stop()
}

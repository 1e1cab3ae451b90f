package metrics

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// TestThroughput: bytes land in their minute, minutes older than an hour
// drop out, and today's count starts again at midnight.
func TestThroughput(t *testing.T) {
	t.Parallel()
	var tp Throughput
	start := time.Date(2025, 11, 23, 22, 0, 10, 0, time.UTC)
	tp.Add(start, 100)
	tp.Add(start.Add(30*time.Second), 50)
	tp.Add(start.Add(2*time.Minute), 7)
	minutes, today, since := tp.Read(start.Add(2 * time.Minute))
	if len(minutes) != 60 || minutes[59] != 7 || minutes[58] != 0 || minutes[57] != 150 || today != 157 || !since.Equal(start) {
		t.Errorf("after 2 min: %v today %d since %v", minutes[55:], today, since)
	}
	minutes, today, _ = tp.Read(start.Add(61 * time.Minute))
	if slices.Max(minutes) != 7 || minutes[0] != 7 {
		t.Errorf("an hour on: %v, want only the 7 bytes of minute 2, oldest", minutes)
	}
	if today != 157 {
		t.Errorf("today = %d before midnight", today)
	}
	tp.Add(start.Add(122*time.Minute), 1) // 00:02 the next day
	minutes, today, since = tp.Read(start.Add(122 * time.Minute))
	if today != 1 || !since.Equal(time.Date(2025, 11, 24, 0, 0, 0, 0, time.UTC)) || minutes[59] != 1 || slices.Max(minutes) != 1 {
		t.Errorf("after midnight: today %d since %v, minutes %v", today, since, minutes[50:])
	}
}

// TestEventLog: the latest EventCap events, newest first.
func TestEventLog(t *testing.T) {
	t.Parallel()
	var l EventLog
	if got := l.List(); len(got) != 0 {
		t.Errorf("empty log lists %v", got)
	}
	for i := range EventCap + 5 {
		l.Add(Event{Job: uint64(i), Stage: state.Done, Text: fmt.Sprint(i)})
	}
	got := l.List()
	if len(got) != EventCap || got[0].Job != EventCap+4 || got[EventCap-1].Job != 5 {
		t.Errorf("%d events, first %d last %d; want %d, newest %d first, oldest %d", len(got), got[0].Job, got[len(got)-1].Job, EventCap, EventCap+4, 5)
	}
}

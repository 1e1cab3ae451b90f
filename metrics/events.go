package metrics

import (
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// EventCap is how many events an EventLog keeps.
const EventCap = 100

// Event is one thing that happened to a job: a file found, a stage
// reached, an operator's action.
type Event struct {
	Time time.Time `json:"time"`
	// Job is 0 for a file found, whose job id the store does not return.
	Job    uint64      `json:"job"`
	Folder string      `json:"folder,omitempty"`
	Path   string      `json:"path"`
	Stage  state.Stage `json:"stage"`
	// Text says what happened ("failed: invalid PLY header",
	// "retry by an operator, via status page (127.0.0.1:51234)").
	Text string `json:"text"`
}

// EventLog keeps the latest EventCap events in memory, for the status page.
// Its methods are safe for concurrent use; Add never blocks on a reader.
type EventLog struct {
	mu   sync.Mutex
	ring [EventCap]Event
	next int // where the next event goes
	n    int // how many are held
}

// Add records e.
func (l *EventLog) Add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = e
	l.next = (l.next + 1) % EventCap
	l.n = min(l.n+1, EventCap)
}

// List returns the events held, newest first.
func (l *EventLog) List() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Event, l.n)
	for i := range l.n {
		out[i] = l.ring[(l.next-1-i+EventCap)%EventCap]
	}
	return out
}

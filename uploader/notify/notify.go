// Package notify tells other systems that a job is final: a JSON event
// POSTed to a webhook (retried with backoff) and a command run with the
// event on its stdin. Events wait in bounded queues that the Notifier's Run
// drains, so a slow or dead receiver never holds up a
// worker; a failed or dropped notification is logged and counted, and
// never fails the job. Neither channel ever carries the API token.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
)

// Kinds of notification, as counted by Observer.NotifyError.
const (
	KindWebhook = "webhook"
	KindExec    = "exec"
)

// Defaults used when the corresponding Options field is zero.
const (
	DefaultQueue       = 256
	DefaultExecTimeout = 30 * time.Second
	DefaultOutputLimit = 4 << 10
	// DefaultPostTimeout bounds one webhook attempt.
	DefaultPostTimeout = 30 * time.Second
	// DefaultGrace is how long events still queued when Run's context
	// ends may go out.
	DefaultGrace = 10 * time.Second
)

// tokenEnv is never passed to a command: it would hand the API token to
// every script a studio hooks in.
const tokenEnv = "SPLATD_TOKEN"

// Observer counts notifications that failed after their last try or were
// dropped from a full queue. metrics.Metrics implements it.
type Observer interface {
	NotifyError(kind string)
}

type nopObserver struct{}

func (nopObserver) NotifyError(string) {}

// Command is what after.exec runs: a program and its arguments (no shell),
// with the event as JSON on stdin.
type Command struct {
	Argv []string
	// Timeout ends the command (it is killed). Zero: DefaultExecTimeout.
	Timeout time.Duration
}

// Options configures a Notifier. With neither Webhook nor Exec it accepts
// events and does nothing.
type Options struct {
	// Webhook is the URL events are POSTed to ("" for none). The caller
	// checks the scheme (https, or http on loopback).
	Webhook string
	// Headers are added to every webhook request (an Authorization of the
	// receiver's own, say). Never the API token: the caller checks.
	Headers http.Header
	// Client sends the webhook requests. Nil: a client with
	// DefaultPostTimeout.
	Client *http.Client
	// Policy is the one retry rule. Its webhook patience
	// (state.ProfileWebhook: 5 tries about 10, 20, 40, 80 s apart) spaces and
	// bounds the tries; what it retries (network errors, 408, 429, 5xx, a
	// redirect) is the rule's, and a Retry-After lengthens a wait.
	Policy state.Policy
	// Exec returns the command for a job's watch root (state.Job.Root);
	// nil, or a Command without Argv, runs nothing.
	Exec func(root string) Command
	// Environ is the environment commands start from, before SPLATD_TOKEN
	// and every variable that names a credential (NamesCredential) are
	// removed and the SPLATD_ event variables are added. Nil: os.Environ.
	Environ func() []string
	// OutputLimit caps the bytes of a command's output that are logged.
	// Zero: DefaultOutputLimit.
	OutputLimit int
	// Queue is how many events may wait per channel; more are dropped and
	// counted. Zero: DefaultQueue.
	Queue int
	// Grace is how long Run still delivers the events queued when its
	// context ends (a stopping daemon's last jobs); what is left then is
	// abandoned. Zero: DefaultGrace; negative: none.
	Grace    time.Duration
	Observer Observer
	Logger   zerolog.Logger
}

// Event is what a webhook receives and a command reads on stdin: the kind
// of event and the receipt's fields.
type Event struct {
	// Event is the job's outcome: done, failed, held, duplicate or canceled.
	Event string    `json:"event"`
	Time  time.Time `json:"time"`
	after.Receipt
}

// Target is where events go: Options' Webhook, Headers and Exec, which
// SetTarget replaces at run time.
type Target struct {
	Webhook string
	Headers http.Header
	Exec    func(root string) Command
}

// delivery is one queued event for one channel, with the webhook and the
// command in force when it was queued: a reload meanwhile does not send an
// event half to the old target and half to the new one.
type delivery struct {
	ev      Event
	body    []byte
	cmd     Command
	webhook string
	headers http.Header
}

// Notifier delivers events: Finished queues them, Run delivers them.
type Notifier struct {
	o      Options
	log    zerolog.Logger
	target atomic.Pointer[Target] // Options' Webhook, Headers and Exec, as SetTarget last set them
	ran    atomic.Bool

	mu     sync.Mutex // guards closed and the sends on the queues
	closed bool
	hooks  chan delivery
	cmds   chan delivery
}

// New checks o and makes the queues; Run delivers what they hold.
func New(o Options) (*Notifier, error) {
	if err := checkWebhook(o.Webhook); err != nil {
		return nil, err
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: DefaultPostTimeout}
	}
	// No redirect is followed: a 3xx is a failed delivery with its status.
	// Following one would send the event, the custom headers and (as
	// Referer) the secret URL path to whatever host the answer names,
	// over plain http too.
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &c
	if o.Environ == nil {
		o.Environ = os.Environ
	}
	if o.OutputLimit <= 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	n := &Notifier{
		o:     o,
		log:   o.Logger.With().Str("component", "notify").Logger(),
		hooks: make(chan delivery, o.Queue),
		cmds:  make(chan delivery, o.Queue),
	}
	n.target.Store(&Target{Webhook: o.Webhook, Headers: o.Headers, Exec: o.Exec})
	return n, nil
}

// SetTarget replaces the webhook, its headers and the commands, for a
// config reload: events of jobs that finish from now on go to t. Events
// already queued or being delivered keep the target they were queued for.
// An invalid webhook changes nothing.
func (n *Notifier) SetTarget(t Target) error {
	if err := checkWebhook(t.Webhook); err != nil {
		return err
	}
	n.target.Store(&t)
	return nil
}

// Target returns the target in force.
func (n *Notifier) Target() Target { return *n.target.Load() }

// Finished queues the notifications of a final job whose receipt is rec
// (File where the file now is), from watch root root. It never blocks: a
// full queue drops the event, with a log line and a count.
func (n *Notifier) Finished(root string, rec after.Receipt) {
	t := n.target.Load()
	var cmd Command
	if t.Exec != nil {
		cmd = t.Exec(root)
	}
	if t.Webhook == "" && len(cmd.Argv) == 0 {
		return
	}
	ev := Event{Event: rec.Status, Time: time.Now().UTC(), Receipt: rec}
	body, err := json.Marshal(ev)
	if err != nil { // a Receipt always encodes; kept for the record
		n.log.Error().Err(err).Uint64("job", rec.Job).Msg("cannot encode the event")
		return
	}
	d := delivery{ev: ev, body: body, cmd: cmd, webhook: t.Webhook, headers: t.Headers}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if d.webhook != "" {
		n.enqueue(n.hooks, d, KindWebhook)
	}
	if len(cmd.Argv) > 0 {
		n.enqueue(n.cmds, d, KindExec)
	}
}

func (n *Notifier) enqueue(q chan delivery, d delivery, kind string) {
	select {
	case q <- d:
	default:
		n.o.Observer.NotifyError(kind)
		n.log.Warn().Str("kind", kind).Uint64("job", d.ev.Job).Str("event", d.ev.Event).Int("queue", cap(q)).
			Msg("notification queue full; event dropped")
	}
}

// Run delivers the queued events, one goroutine per channel working its
// queue in order, until ctx ends. Then it takes no more events, delivers
// those still queued for Options.Grace (the drain), and abandons what is
// left (a webhook between tries, a running command) with a log line. It
// returns nil after a complete drain, context.DeadlineExceeded after an
// abandoned one. Run runs once.
func (n *Notifier) Run(ctx context.Context) error {
	if n.ran.Swap(true) {
		return errors.New("notify: Run called twice")
	}
	// live ends the deliveries in flight: only once the grace is over.
	live, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range n.hooks {
			n.post(live, d)
		}
	})
	wg.Go(func() {
		for d := range n.cmds {
			n.run(live, d)
		}
	})
	<-ctx.Done()
	n.mu.Lock()
	n.closed = true
	close(n.hooks)
	close(n.cmds)
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	grace := time.NewTimer(max(n.o.Grace, 0))
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
		left := len(n.hooks) + len(n.cmds)
		abandon()
		<-done
		n.log.Warn().Int("queued", left).Msg("stopping: notifications still queued or in flight were abandoned")
		return context.DeadlineExceeded
	}
}

// Package notify tells other systems that a job is final: a JSON event
// POSTed to a webhook (retried with backoff) and a command run with the
// event on its stdin. Events wait in bounded queues that the Notifier's Run
// drains, so a slow or dead receiver never holds up a
// worker; a failed or dropped notification is logged and counted, and
// never fails the job. Neither channel ever carries the API token.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

func checkWebhook(webhook string) error {
	if webhook == "" {
		return nil
	}
	u, err := url.Parse(webhook)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("notify: webhook %q is not an http(s) URL", state.URLOrigin(webhook))
	}
	return nil
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

// post delivers one event to the webhook, trying again on transient
// failures. The URL is logged without its path and query, which for chat
// webhooks are the secret.
func (n *Notifier) post(ctx context.Context, d delivery) {
	log := n.log.With().Str("kind", KindWebhook).Str("webhook", state.URLOrigin(d.webhook)).
		Uint64("job", d.ev.Job).Str("event", d.ev.Event).Logger()
	for try := 1; ; try++ {
		err := n.postOnce(ctx, d)
		if err == nil {
			log.Debug().Int("try", try).Msg("webhook delivered")
			return
		}
		dec := n.o.Policy.DecideAs(state.ProfileWebhook, ctx, err, try, time.Now())
		switch dec.Action {
		case state.Retry, state.Resign, state.WaitConfig:
			// A host that does not resolve or refuses is the receiver's
			// trouble, not the daemon's: the webhook's own patience.
			wait := max(dec.Delay, n.o.Policy.Wait(state.ProfileWebhook, try))
			log.Info().Err(err).Int("try", try).Float64("retry_in_s", wait.Seconds()).Msg("webhook failed; trying again")
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
			log.Warn().Err(err).Msg("webhook abandoned at shutdown")
		case state.Stop:
			log.Warn().Err(err).Msg("webhook abandoned at shutdown")
		default:
			log.Warn().Err(err).Int("tries", try).Msg("webhook failed; event not delivered")
		}
		n.o.Observer.NotifyError(KindWebhook)
		return
	}
}

// answerError is a webhook's non-2xx answer, in the terms of the retry
// rule: its status, and the wait its Retry-After asks for.
type answerError struct {
	status     string
	code       int
	retryAfter time.Duration
}

func (e *answerError) Error() string {
	if e.code >= 300 && e.code < 400 {
		// Not followed (New): sending the event, the custom headers and
		// the secret URL path (as Referer) wherever an answer points.
		return "answered " + e.status + " (redirects are not followed)"
	}
	return "answered " + e.status
}
func (e *answerError) HTTPStatus() int   { return e.code }
func (e *answerError) FromStorage() bool { return false }

// RetryWait is the receiver's Retry-After, if it sent one.
func (e *answerError) RetryWait(time.Time) time.Duration { return e.retryAfter }

// postOnce sends one attempt.
func (n *Notifier) postOnce(ctx context.Context, d delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.webhook, bytes.NewReader(d.body))
	if err != nil {
		return err
	}
	for k, vs := range d.headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "splatd")
	req.Header.Set("X-Splatd-Event", d.ev.Event)
	req.Header.Del("Referer")
	resp, err := n.o.Client.Do(req)
	if err != nil {
		// The error text names the URL; keep only the host.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s: %w", ue.Op, ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &answerError{status: resp.Status, code: resp.StatusCode}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.retryAfter = time.Duration(secs) * time.Second
	}
	return e
}

// run runs one command with the event on stdin, within its timeout.
func (n *Notifier) run(ctx context.Context, d delivery) {
	timeout := d.cmd.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	log := n.log.With().Str("kind", KindExec).Str("command", d.cmd.Argv[0]).
		Uint64("job", d.ev.Job).Str("event", d.ev.Event).Logger()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cmd.Argv[0], d.cmd.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(d.body)
	out := &capped{limit: n.o.OutputLimit}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = n.environ(d.ev)
	// A grandchild that keeps the output pipe open must not hold us past
	// the kill.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Seconds()
	if err == nil {
		log.Info().Float64("took_s", took).Str("output", out.String()).Msg("command done")
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("killed after its timeout of %s: %w", timeout, err)
	}
	n.o.Observer.NotifyError(KindExec)
	log.Warn().Err(err).Float64("took_s", took).Str("output", out.String()).Msg("command failed")
}

// environ is the command's environment: the daemon's without the token,
// plus the event's variables.
func (n *Notifier) environ(ev Event) []string {
	set := []string{
		"SPLATD_EVENT=" + ev.Event,
		"SPLATD_FILE=" + ev.File,
		fmt.Sprintf("SPLATD_JOB=%d", ev.Job),
		"SPLATD_SPLAT_URL=" + ev.Splat.URL,
	}
	skip := map[string]bool{tokenEnv: true}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		skip[k] = true
	}
	var env []string
	for _, kv := range n.o.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !skip[k] && !NamesCredential(k) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// credentialWords are the name parts (split at "_", any case) that mark a
// variable as a credential; credentialParts mark it wherever they appear
// in the name (GITHUB_TOKEN, MYSQLPASSWORD, AWS_SECRET_ACCESS_KEY).
var (
	credentialWords = map[string]bool{
		"KEY": true, "KEYS": true, "APIKEY": true, "AUTH": true, "PASS": true,
		"PASSPHRASE": true, "COOKIE": true, "SESSION": true, "BEARER": true,
	}
	credentialParts = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE"}
)

// NamesCredential reports whether the environment variable name names a
// credential (CREDENTIALS_DIRECTORY, credentialParts, credentialWords), which
// an after.exec command never inherits.
func NamesCredential(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range credentialParts {
		if strings.Contains(up, p) {
			return true
		}
	}
	for _, w := range strings.Split(up, "_") {
		if credentialWords[w] {
			return true
		}
	}
	return false
}

// capped keeps the first limit bytes written to it and counts the rest; it
// never fails a write, so a chatty command is not killed by a broken pipe.
type capped struct {
	mu      sync.Mutex // stdout and stderr are copied by two goroutines
	limit   int
	b       bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - c.b.Len()
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		c.b.Write(p[:room])
	}
	c.dropped += len(p) - max(room, 0)
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(c.b.String())
	if c.dropped > 0 {
		s += fmt.Sprintf(" … (%d more bytes)", c.dropped)
	}
	return s
}

package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/splatd/splatd/state"
)

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

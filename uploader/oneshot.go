package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
)

// OneShotOptions tunes PublishFile, the foreground publish of `splatd
// publish`. It has no queue behind it: what it does not finish is not resumed.
type OneShotOptions struct {
	// Attempts bounds the tries of each step on transient errors (network,
	// 5xx, 429, storage 403). Zero means 5.
	Attempts int
	// PollInterval and PollMaxInterval pace the polling after publish; the
	// interval doubles up to the maximum. PollTimeout bounds the whole wait.
	PollInterval, PollMaxInterval, PollTimeout time.Duration
	// Progress, when set, receives bytes sent of the file's size.
	Progress func(sent, size int64)
	// Stage, when set, is told each step as it starts ("sign", "upload",
	// "publish", "processing") and each unknown task status seen.
	Stage func(step, detail string)
}

func (o *OneShotOptions) fill() {
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.PollMaxInterval < o.PollInterval {
		o.PollMaxInterval = 30 * time.Second
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 2 * time.Hour
	}
	if o.Stage == nil {
		o.Stage = func(string, string) {}
	}
}

// ErrProcessingFailed wraps the server's task message when processing ends
// in a failed status.
var ErrProcessingFailed = errors.New("processing failed")

// PublishFile signs, uploads, publishes and polls one file to a terminal
// status with the publish parameters params. The returned Splat is the last record seen, also on failure.
func PublishFile(ctx context.Context, c *api.Client, path string, params state.PublishParams, o OneShotOptions) (api.Splat, error) {
	o.fill()
	f, err := os.Open(path)
	if err != nil {
		return api.Splat{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return api.Splat{}, err
	}

	var up api.Upload
	sign := func() error {
		o.Stage("sign", "")
		return RetryTransient(ctx, o.Attempts, func() error {
			var err error
			up, err = c.SignedURL(ctx, filepath.Base(path))
			return err
		})
	}
	if err := sign(); err != nil {
		return api.Splat{}, err
	}

	o.Stage("upload", "")
	err = RetryTransient(ctx, o.Attempts, func() error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		var progress func(int64)
		if o.Progress != nil {
			progress = func(sent int64) { o.Progress(sent, fi.Size()) }
		}
		err := c.Put(ctx, up.URL, f, fi.Size(), progress)
		var ae *api.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
			// Storage refused the signature (expired or revoked): a new URL
			// and another try, which the retry loop counts as transient.
			if serr := sign(); serr != nil {
				return serr
			}
			o.Stage("upload", "new signed URL")
		}
		return err
	})
	if err != nil {
		return api.Splat{}, err
	}

	o.Stage("publish", "")
	r := api.PublishRequest{Key: up.Key, KeyField: up.KeyField, PublishParams: params}
	var sp api.Splat
	err = RetryTransient(ctx, o.Attempts, func() error {
		var err error
		sp, err = c.Publish(ctx, r)
		return err
	})
	if err != nil {
		return api.Splat{}, err
	}

	o.Stage("processing", sp.Task.Status)
	deadline := time.Now().Add(o.PollTimeout)
	interval := o.PollInterval
	for {
		switch sp.Outcome() {
		case api.OutcomeDone:
			return sp, nil
		case api.OutcomeFailed:
			return sp, fmt.Errorf("%w: status %q: %s", ErrProcessingFailed, sp.Task.Status, sp.Task.Message)
		case api.OutcomeUnknown:
			o.Stage("processing", "unknown task status "+sp.Task.Status)
		}
		if time.Now().After(deadline) {
			return sp, fmt.Errorf("processing did not finish within %s (last status %q)", o.PollTimeout, sp.Task.Status)
		}
		select {
		case <-ctx.Done():
			return sp, ctx.Err()
		case <-time.After(interval):
		}
		interval = min(interval*2, o.PollMaxInterval)
		var next api.Splat
		err := RetryTransient(ctx, o.Attempts, func() error {
			var err error
			next, err = c.Splat(ctx, sp.ID)
			return err
		})
		if err != nil {
			return sp, err // the last good record: the user keeps the splat's id and link
		}
		if next.URL == "" {
			next.URL = sp.URL // a minimal get-splat record carries no link
		}
		sp = next
	}
}

// RetryTransient runs fn until it succeeds, fails permanently or runs out of
// attempts. Transient: network errors, 5xx, 429 and storage 403. Waits honour
// Retry-After and X-RateLimit-Reset, else back off exponentially with jitter.
func RetryTransient(ctx context.Context, attempts int, fn func() error) error {
	var err error
	for i := 0; i < attempts; i++ {
		err = fn()
		if err == nil || !oneshotTransient(err) || ctx.Err() != nil {
			return err
		}
		if i == attempts-1 {
			break
		}
		wait := time.Duration(1<<i) * time.Second
		wait = wait/2 + rand.N(wait/2+1)
		var ae *api.APIError
		if errors.As(err, &ae) {
			if ae.RetryAfter > wait {
				wait = ae.RetryAfter
			}
			if d := time.Until(ae.Reset); ae.Status == http.StatusTooManyRequests && d > wait {
				wait = d
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return err
}

func oneshotTransient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *api.ProtocolError
	if errors.As(err, &pe) {
		// A 2xx we cannot read: after publish the splat may exist, so never
		// repeat that; a poll answer (a proxy's page, say) can be asked again.
		return pe.Route != api.RoutePublish
	}
	var ae *api.APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests ||
			(ae.FromStorage() && ae.Status == http.StatusForbidden)
	}
	return true // no HTTP answer: the network or the server's connection
}

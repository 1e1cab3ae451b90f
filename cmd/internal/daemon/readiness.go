package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// apiGrace is how long the API may go unanswered (no answer, or 5xx to
// every call) before the daemon says it is not ready: one lost answer or
// a restarting server within it changes nothing (README, Readiness).
const apiGrace = 30 * time.Second

// Reason is the readiness in one line: "" when ready, else why not.
func (d *Daemon) Reason() string {
	if err := d.ready(); err != nil {
		return err.Error()
	}
	return ""
}

// ready is /readyz: the state is open, every watch root is scanned and
// watched (or polled), the API answers and accepts the token.
func (d *Daemon) ready() error {
	var why []string
	if !d.watch.Healthy() {
		why = append(why, "watch folders not (yet) scanned and watched")
	}
	if err := d.store.Damaged(); err != nil {
		why = append(why, err.Error())
	} else if err := d.pool.StoreError(); err != nil {
		why = append(why, fmt.Sprintf("the job store fails: %v", err))
	} else if err := d.storeError(); err != nil {
		why = append(why, fmt.Sprintf("the job store refuses writes: %v", err))
	}
	if err := d.pool.Paused(); err != nil {
		why = append(why, fmt.Sprintf("the API refuses the token read from %s: %v", d.client.Token().Origin(), err))
	}
	problems := d.readyProblems()
	why = append(why, problems...)
	if err, since := d.client.Unreachable(); err != nil && len(problems) == 0 {
		if for_ := time.Since(since); for_ >= d.apiGrace {
			why = append(why, fmt.Sprintf("the API has not answered for %s: %v", for_.Round(time.Second), err))
		}
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

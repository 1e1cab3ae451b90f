package state

import (
	"fmt"
	"slices"
	"time"
)

// Reset is why a job moves back: each reason keeps and drops its own part
// of the record (the table in TestReset says which).
type Reset string

// The reasons to move a job back.
const (
	// ResetRetry: an operator's retry of a failed or canceled job, from the
	// file again. A v1 session is kept (the same content finds it by its
	// key); once a splat was made it is a republish: a new generation.
	ResetRetry Reset = "retry"
	// ResetRepublish: a done job published again on purpose (`splatd
	// republish`, `splatd retry` of a done job): a new generation.
	ResetRepublish Reset = "republish"
	// ResetResume: an operator's retry of a held job: its upload is
	// published again under a fresh intent.
	ResetResume Reset = "resume"
	// ResetChanged: the file changed before its publish call; the worker
	// sets its new size and mtime and hashes it again.
	ResetChanged Reset = "changed"
)

// resets lists, per reason, the stages it leaves from and the one it goes to.
var resets = map[Reset]struct {
	from []Stage
	to   Stage
}{
	ResetRetry:     {[]Stage{Failed, Canceled}, Queued},
	ResetRepublish: {[]Stage{Done}, Queued},
	ResetResume:    {[]Stage{Held}, Uploaded},
	ResetChanged:   {[]Stage{Queued, Ready, Signed, Uploaded}, Queued},
}

// Reset moves j back for reason why, due now, dropping what that reason
// makes stale. It is the one way a job goes back; a reason that does not
// leave from j's stage is an error.
func (j *Job) Reset(why Reset, now time.Time) error {
	r, ok := resets[why]
	if !ok || !slices.Contains(r.from, j.Stage) {
		return fmt.Errorf("job %d is %s: no %s from there", j.ID, j.Stage, why)
	}
	if err := j.Move(r.to, now); err != nil {
		return err
	}
	j.NextAttempt = now
	j.Uncertain = false
	j.Wait, j.Failure, j.After = Wait{}, Failure{}, After{}
	if why == ResetResume {
		j.TaskMessage = ""
		return nil
	}
	// From the file again: nothing derived from its last content is kept.
	if why == ResetRepublish || j.SplatID != "" {
		j.Generation++
		j.Protocol, j.V1 = "", nil
		j.DuplicateOf, j.Publishes = 0, 0
	}
	if why == ResetChanged {
		j.Protocol, j.V1 = "", nil // a session of the old content is abandoned
	}
	j.File = File{Path: j.Path, Root: j.Root, Size: j.Size, ModTime: j.ModTime}
	j.Encoding = Encoding{}
	j.Upload, j.Resigns = Upload{}, 0
	j.Splat = Splat{}
	j.Adopted = false
	return nil
}

package state

import (
	"fmt"
	"time"
)

// transitions is the one table of legal stage changes, checked at every
// commit (docs/architecture.md, "Job stages"). Same-stage edges are retries;
// a worker's edges back to Queued (ResetChanged) exist only before the
// publish intent; edges out of a final stage are an operator's (Job.Reset,
// Resolve), refused in a worker's commit.
var transitions = map[Stage][]Stage{
	Queued: {
		Queued,   // incomplete, changed since seen, or transient error
		Ready,    // checked and hashed
		Done,     // content already published by another job (duplicate)
		Failed,   // invalid file, gone
		Canceled, // operator: splatd cancel
	},
	Ready: {
		Ready,    // transient sign error
		Signed,   // got a signed URL
		Queued,   // file changed
		Failed,   // sign refused (400/403/404)
		Canceled, // operator
	},
	Signed: {
		Signed,   // transient PUT error
		Ready,    // URL expired or refused by storage: sign again
		Uploaded, // PUT succeeded
		Queued,   // file changed before or during the PUT
		Failed,
		Canceled, // operator (a PUT in flight finishes; its commit then finds the job canceled)
	},
	Uploaded: {
		Uploaded,
		Publishing, // intent committed before the publish call
		Queued,     // file changed after its upload
		Failed,
		Canceled, // operator, before the publish intent
	},
	Publishing: {
		Publishing, // transient publish error: publish again
		Uploaded,   // publish refused with 429: certainly nothing created; a fresh intent later
		Processing, // publish answered with the splat
		Held,       // outcome unknown and on_uncertain=hold
		Failed,     // publish refused (400/403/404)
	},
	Processing: {
		Processing, // still running: poll again
		Done,
		Failed, // processing failed or did not finish within poll.timeout
	},
	Done: {
		Queued, // operator republish: a new publish of the same content, on purpose
	},
	Failed: {
		Queued, // operator retry: start again from the file
	},
	Canceled: {
		Queued, // operator retry: start again from the file
	},
	Held: {
		// Operator decided to publish again. Back to Uploaded, not straight
		// to Publishing: the worker then commits a fresh intent, so a job
		// found in Publishing at start is always one whose call may have
		// been made, never one that merely waited for its retry.
		Uploaded,
		Queued,     // operator retry from the file
		Processing, // operator confirmed the splat that the lost answer created (splatd resolve)
		Failed,
		Canceled, // operator decided not to publish
	},
}

// CanMove reports whether a job may go from stage from to stage to.
func CanMove(from, to Stage) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// TransitionError is returned for a stage change the table does not allow.
type TransitionError struct {
	ID       uint64
	From, To Stage
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("job %d: illegal transition %s → %s", e.ID, e.From, e.To)
}

// Move sets j's stage to `to` if the table allows it, resetting the
// per-stage bookkeeping (Attempts, StageSince) when the stage really changes.
func (j *Job) Move(to Stage, now time.Time) error {
	if !CanMove(j.Stage, to) {
		return &TransitionError{ID: j.ID, From: j.Stage, To: to}
	}
	if j.Stage != to {
		j.Attempts = 0
		j.StageSince = now
	}
	j.Stage = to
	j.UpdatedAt = now
	return nil
}

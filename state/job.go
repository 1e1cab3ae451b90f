// Package state holds splatd's job model: the stages a file goes through on
// its way to a published splat, the one table of legal transitions between
// them, the retry policy and the classification of errors into what the
// worker should do next. It is pure code (no I/O) so that the queue, the
// worker and the CLI agree on the rules without depending on each other.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrStale is what a store returns when a job's stored stage is not the one
// a commit expected: somebody else moved it. It is a logic error, not a
// store failure, so retrying the same commit cannot help.
var ErrStale = errors.New("job changed since it was read")

// Stage is where a job stands in the publish pipeline. Every stage is
// committed to the store before the side effect of the next one starts, so a
// restarted daemon resumes each job from its last committed stage.
type Stage string

// The stages, in pipeline order. Done, Failed, Held and Canceled are final
// until an operator retries (Held, Failed, Canceled), republishes (Done) or
// never.
const (
	// Queued: seen by the watcher; waiting until the file is complete, valid
	// and unchanged.
	Queued Stage = "queued"
	// Ready: content checked, sha256, size and publish parameters recorded.
	Ready Stage = "ready"
	// Signed: a signed upload URL and storage key are stored.
	Signed Stage = "signed"
	// Uploaded: the storage PUT succeeded; a restart does not upload again.
	Uploaded Stage = "uploaded"
	// Publishing: the intent to publish is committed before the publish
	// call, so a job found here after a crash has an unknown outcome.
	Publishing Stage = "publishing"
	// Processing: the splat exists (id, hash, viewer URL stored); polling.
	Processing Stage = "processing"
	// Done: published and processed, or a duplicate of published content.
	Done Stage = "done"
	// Failed: given up, with the reason; `splatd retry` re-queues it.
	Failed Stage = "failed"
	// Held: the publish outcome is unknown and publish.on_uncertain is
	// "hold"; an operator decides (`splatd retry` publishes again).
	Held Stage = "held"
	// Canceled: an operator stopped the job before its publish call
	// (`splatd cancel`); not a failure. `splatd retry` re-queues it.
	Canceled Stage = "canceled"
)

// Stages lists every stage in pipeline order (for stats and metrics labels).
var Stages = []Stage{Queued, Ready, Signed, Uploaded, Publishing, Processing, Done, Failed, Held, Canceled}

// Valid reports whether s is one of the declared stages.
func (s Stage) Valid() bool {
	for _, v := range Stages {
		if s == v {
			return true
		}
	}
	return false
}

// Final reports whether no worker will touch a job in stage s again without
// an operator's retry.
func (s Stage) Final() bool { return s == Done || s == Failed || s == Held || s == Canceled }

// Finished reports whether a job in stage s is over for good unless an
// operator starts it again: the jobs retention prunes (held jobs wait for
// an operator and are kept).
func (s Stage) Finished() bool { return s == Done || s == Failed || s == Canceled }

// Cancelable reports whether an operator may cancel a job in stage s: any
// stage before the publish call, and held (the operator decides not to
// publish). From publishing on the splat may exist; canceling would hide it.
func (s Stage) Cancelable() bool {
	return CanMove(s, Canceled)
}

// Published reports whether a job in stage s has (or may have) sent its
// publish call, i.e. whether restarting it from scratch could publish twice.
func (s Stage) Published() bool { return s == Publishing || s == Processing || s == Done || s == Held }

// JobVersion is the schema version of the Job JSON encoding. Readers refuse
// records with a newer version instead of silently dropping fields.
const JobVersion = 1

// Job is one file's way through the pipeline. It is stored as JSON; the V
// field carries JobVersion so that a future layout can be migrated.
type Job struct {
	V  int    `json:"v"`
	ID uint64 `json:"id"`

	// The file as last seen: Size and ModTime are what the content check and
	// hash were computed on; any later difference means the file changed.
	Path    string    `json:"path"`
	Root    string    `json:"root,omitempty"` // the watch root it came from
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	SHA256  string    `json:"sha256,omitempty"`
	Kind    string    `json:"kind,omitempty"` // splatfile kind: ply, compressed-ply, sog

	Stage       Stage     `json:"stage"`
	Attempts    int       `json:"attempts,omitempty"` // failed attempts at the current stage
	NextAttempt time.Time `json:"next_attempt"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	StageSince  time.Time `json:"stage_since"`

	// Uncertain marks a job found in Publishing when the store was opened:
	// its publish call may or may not have reached the API.
	Uncertain bool `json:"uncertain,omitempty"`
	// Publishes counts publish calls sent for this job (more than one only
	// after an uncertain outcome was republished or a 5xx was retried).
	Publishes int `json:"publishes,omitempty"`
	// Generation counts the operator's republishes of this job's content
	// (`splatd republish`): each one is a new publish on purpose, so a
	// protocol's idempotency key must differ from the last one's.
	Generation int `json:"generation,omitempty"`

	// Finalized is set once the pool's Finish hook (after-actions, receipt)
	// has run for a final job; a crash in between runs it again at start.
	Finalized bool `json:"finalized,omitempty"`

	Upload Upload        `json:"upload,omitzero"`
	Params PublishParams `json:"params,omitzero"`

	SplatID     string     `json:"splat_id,omitempty"`
	SplatHash   string     `json:"splat_hash,omitempty"`
	ViewerURL   string     `json:"viewer_url,omitempty"`
	TaskStatus  string     `json:"task_status,omitempty"`
	TaskMessage string     `json:"task_message,omitempty"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`

	LastError  string `json:"last_error,omitempty"`
	LastStatus int    `json:"last_status,omitempty"` // HTTP status of the last error, 0 if none
	FailReason string `json:"fail_reason,omitempty"`
	// DuplicateOf is the id of the job that published the same content;
	// set on jobs that reached Done without being uploaded.
	DuplicateOf uint64 `json:"duplicate_of,omitempty"`
}

// Upload is the signed upload descriptor a job holds between Signed and
// Publishing. URL is a bearer secret for the storage object: never log it.
type Upload struct {
	URL      string    `json:"url,omitempty"`
	Key      string    `json:"key,omitempty"`
	KeyField string    `json:"key_field,omitempty"` // "storageKey" or "s3Key", echoed to publish
	IssuedAt time.Time `json:"issued_at,omitzero"`
}

// PublishParams are the publish call's parameters, resolved (config,
// sidecar, title template) once when the job becomes Ready so that a
// restarted daemon publishes with exactly the same values.
type PublishParams struct {
	Title       string         `json:"title,omitempty"`
	Description string         `json:"description,omitempty"`
	Listed      bool           `json:"listed,omitempty"`
	Format      string         `json:"format,omitempty"`
	Settings    map[string]any `json:"settings,omitempty"`
}

// Marshal encodes j with the current schema version.
func (j Job) Marshal() ([]byte, error) {
	j.V = JobVersion
	return json.Marshal(j)
}

// Unmarshal decodes a stored job and refuses one written by a newer splatd.
func Unmarshal(b []byte) (Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return Job{}, fmt.Errorf("decode job: %w", err)
	}
	if j.V > JobVersion {
		return Job{}, fmt.Errorf("job %d has schema version %d, newer than this splatd's %d", j.ID, j.V, JobVersion)
	}
	return j, nil
}

// Package state holds splatd's job model: the stages a file goes through on
// its way to a published splat, the one table of legal transitions, and the
// one retry rule (Policy) that turns every error into what the caller does
// next (docs/architecture.md). It is pure code (no I/O), so the queue, the
// workers and the CLI agree on the rules without depending on each other.
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

// JobVersion is the newest schema version of the Job JSON encoding. Readers
// refuse records with a newer version instead of silently dropping fields.
//
// Version 2 added Protocol, Generation and V1 (the SuperSplat API v1). A
// job that uses none of them is still written as version 1, so that a
// splatd from before v1 can read a legacy-only state file; one that does is
// refused by such a splatd rather than resumed without its session.
// Version 3 added path_bytes and root_bytes, a name Shown escapes.
const JobVersion = 3

// Job is one file's way through the pipeline: the file's identity, its
// stage and attempt bookkeeping, and one sub-record per concern. The
// sub-records are embedded, so that their fields are stored flat (the JSON
// layout of every schema version is unchanged) and read as j.Path. It is
// stored as JSON; V carries JobVersion so that a future layout can be
// migrated. Reset (reset.go) is the one way back.
type Job struct {
	V  int    `json:"v"`
	ID uint64 `json:"id"`
	File

	Stage       Stage     `json:"stage"`
	Attempts    int       `json:"attempts,omitempty"` // failed attempts at the current stage
	NextAttempt time.Time `json:"next_attempt"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	StageSince  time.Time `json:"stage_since"`

	Publication
	Upload Upload        `json:"upload,omitzero"`
	Params PublishParams `json:"params,omitzero"`
	Encoding
	// V1 is the upload session under the v1 protocol; nil under legacy.
	V1 *Session `json:"v1,omitempty"`
	Splat
	Wait
	Failure
	After
}

// File is the file as last seen: Size and ModTime are what the content
// check and hash were computed on; any later difference means it changed.
type File struct {
	Path    string    `json:"path"`
	Root    string    `json:"root,omitempty"` // the watch root it came from
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	// Dev and Ino identify the file hashed (0 for jobs from before they
	// were recorded): the upload and the after-actions act only on it.
	Dev    uint64 `json:"dev,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Kind is the splatfile kind: ply, compressed-ply, sog, spz, or
	// sog-folder (an unbundled folder: Size, ModTime and SHA256 are then
	// those of the bundle built from it, not of the meta.json at Path).
	Kind string `json:"kind,omitempty"`
}

// Publication is how a job's content is published and how often it was.
type Publication struct {
	// Protocol is "v1" (ProtocolV1) or "" for the legacy API, recorded when
	// the job leaves Ready: a restart finishes a job the way it began.
	Protocol string `json:"protocol,omitempty"`
	// Generation counts deliberate republishes of this content; it is part
	// of the v1 Idempotency-Key, so a new generation makes a new splat.
	Generation int `json:"generation,omitempty"`
	// Uncertain marks a job found in Publishing when the store was opened:
	// its publish call may or may not have reached the API.
	Uncertain bool `json:"uncertain,omitempty"`
	// Resigns counts storage refusals of fresh signed URLs in a row (the
	// retry rule backs off on it); an upload that succeeds clears it.
	Resigns int `json:"resigns,omitempty"`
	// Publishes counts publish calls sent (more than one only after an
	// uncertain outcome was republished or a 5xx was retried).
	Publishes int `json:"publishes,omitempty"`
	// DuplicateOf is the id of the job that published the same content;
	// set on jobs that reached Done without being uploaded.
	DuplicateOf uint64 `json:"duplicate_of,omitempty"`
	// Adopted marks a job recorded as Done from the file's receipt: it was
	// published before this state directory knew it.
	Adopted bool `json:"adopted,omitempty"`
}

// Encoding is what publish.encode made of the file.
type Encoding struct {
	// Encoded is the file uploaded in place of the original (nil: the
	// original is). File stays the original's: dedupe is by the source.
	Encoded *Encoded `json:"encoded,omitempty"`
	// EncodeSkipped says why an encoding asked for was not made.
	EncodeSkipped string `json:"encode_skipped,omitempty"`
}

// Splat is the published splat as the API reported it.
type Splat struct {
	SplatID     string     `json:"splat_id,omitempty"`
	SplatHash   string     `json:"splat_hash,omitempty"`
	ViewerURL   string     `json:"viewer_url,omitempty"`
	TaskStatus  string     `json:"task_status,omitempty"`
	TaskMessage string     `json:"task_message,omitempty"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Wait says why a job that holds no worker waits until NextAttempt.
type Wait struct {
	// Parked is why a job waits on another daemon of a fleet (a peer's
	// session or receipt); "" when not parked.
	Parked string `json:"parked,omitempty"`
	// RateLimited is the rate-limit delay the job is parked on: its next
	// request was not sent. Each step clears it.
	RateLimited *RateWait `json:"rate_limited,omitempty"`
}

// Failure is the last error and, once failed, the reason.
type Failure struct {
	LastError  string `json:"last_error,omitempty"`
	LastStatus int    `json:"last_status,omitempty"` // HTTP status of the last error, 0 if none
	FailReason string `json:"fail_reason,omitempty"`
}

// After is a final job's after-action stage (receipt, move, delete): until
// it succeeds Finalized stays false and the rest say what failed and when
// it is tried again. A crash before Finalized runs it again at start.
type After struct {
	Finalized     bool      `json:"finalized,omitempty"`
	AfterAction   string    `json:"after_action,omitempty"`
	AfterError    string    `json:"after_error,omitempty"`
	AfterAttempts int       `json:"after_attempts,omitempty"`
	AfterRetry    time.Time `json:"after_retry,omitzero"`
}

// Upload is the signed upload descriptor a job holds between Signed and
// Publishing. URL is a bearer secret for the storage object: never log it.
type Upload struct {
	URL      string    `json:"url,omitempty"`
	Key      string    `json:"key,omitempty"`
	KeyField string    `json:"key_field,omitempty"` // "storageKey" or "s3Key", echoed to publish
	IssuedAt time.Time `json:"issued_at,omitzero"`
}

// Encoded is a local encoding of a job's file, made before upload.
type Encoded struct {
	Encoding string `json:"encoding"` // "sog"
	Path     string `json:"path"`     // under state_dir
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
}

// UploadSize is the size of the bytes a job uploads: its encoding's, or
// the file's own.
func (j Job) UploadSize() int64 {
	if j.Encoded != nil {
		return j.Encoded.Size
	}
	return j.Size
}

// UploadKind is the content kind a job uploads (splatfile kinds).
func (j Job) UploadKind() string {
	if j.Encoded != nil {
		return j.Encoded.Encoding
	}
	return j.Kind
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
	// Encode names a local encoding to upload in place of the file
	// ("sog"); "" uploads the file as it is. Not sent to the API.
	Encode string `json:"encode,omitempty"`
}

// ProtocolV1 is Job.Protocol of a job published through the SuperSplat
// API v1 (docs/api-v1.md).
const ProtocolV1 = "v1"

// Session is a job's upload session under the SuperSplat API v1. Each of
// its fields is committed before the side effect that depends on it: the
// Idempotency-Key before the create call, each part's ETag as the part
// completes, so that a restart resumes with the same key and re-sends only
// the parts the server lacks.
type Session struct {
	// Attempt numbers the sessions this generation of the content has
	// needed: a session that is gone (404) or canceled is replaced under a
	// new key, Attempt+1, committed before that create.
	Attempt int `json:"attempt"`
	// Key is the Idempotency-Key, derived only from the job's record
	// (sha256, Generation, Attempt): every daemon that sees the same content
	// sends the same key and so reaches the same session.
	Key string `json:"key"`
	// Creates counts the create calls committed under Key. A create that
	// answers 200 (an existing session) when it is the first one is proof
	// that another daemon created that session.
	Creates int `json:"creates,omitempty"`
	// Owned is true when this daemon created the session (201, or a create
	// of its own whose answer was lost) or took over a peer's stalled one.
	// A session that is not owned is a peer's: its parts are watched for a
	// while before the missing ones are sent.
	Owned bool `json:"owned,omitempty"`

	// ID and PartSize are the server's, stored with the move to Signed.
	ID       string `json:"id,omitempty"`
	PartSize int64  `json:"part_size,omitempty"`
	// Parts is N = ceil(size / PartSize), at least 1.
	Parts int `json:"parts,omitempty"`
	// ETags holds part k's ETag at index k-1, exactly as storage sent it
	// (quotes included); "" while the part is not stored.
	ETags []string `json:"etags,omitempty"`

	// PeerSince is when the parts of a peer's session were last seen to
	// grow (or first seen); PeerParts how many there were then; PeerPolls
	// the reads since, which pace the next one.
	PeerSince time.Time `json:"peer_since,omitzero"`
	PeerParts int       `json:"peer_parts,omitempty"`
	PeerPolls int       `json:"peer_polls,omitempty"`

	// ReceiptSince is when the job found its session completed by a peer
	// without the splat's id, and began waiting for the peer's receipt;
	// zero when not waiting. NoReceipt records that the wait ended without
	// one (the complete is then replayed, once). FromPeer marks an outcome
	// taken from a peer's receipt: it is done without any API call and its
	// after-action is the peer's.
	ReceiptSince time.Time `json:"receipt_since,omitzero"`
	NoReceipt    bool      `json:"no_receipt,omitempty"`
	FromPeer     bool      `json:"from_peer,omitempty"`

	// Verify makes the next step read the session before completing: a
	// complete was refused (400, 409), so the server's parts are checked
	// again. Resyncs counts those refusals, to give up on a server that
	// keeps refusing the parts it itself lists.
	Verify  bool `json:"verify,omitempty"`
	Resyncs int  `json:"resyncs,omitempty"`

	// EditURL is the splat's edit link from the complete answer.
	EditURL string `json:"edit_url,omitempty"`
	// Output is the splat's format as the service reported it once
	// processed ("" before, or when it did not say).
	Output string `json:"output,omitempty"`
}

// Stored returns the number of parts with an ETag.
func (s *Session) Stored() int {
	n := 0
	for _, e := range s.ETags {
		if e != "" {
			n++
		}
	}
	return n
}

// schemaVersion is the oldest schema version that holds every field j uses.
func (j *Job) schemaVersion() int {
	if Shown(j.Path) != j.Path || Shown(j.Root) != j.Root {
		return 3
	}
	if j.Protocol != "" || j.Generation != 0 || j.V1 != nil {
		return 2
	}
	return 1
}

// Marshal encodes j with the oldest schema version that holds its fields.
func (j Job) Marshal() ([]byte, error) {
	j.V = j.schemaVersion()
	// Not through MarshalJSON: encoding/json would check the depth of its
	// output, and a record too deep to read must still be writable.
	return json.Marshal(j.record())
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

// RateWait is the stored pace.Delay a job was parked on: the class's label,
// the pacer's reason, and when it ends.
type RateWait struct {
	Class  string    `json:"class"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
}

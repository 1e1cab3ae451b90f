package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// Route names, one per API call. They label metrics (low cardinality: never
// a path or an id), key the pacer's route→class map and prefix error texts.
const (
	RouteSignedURL   = "signed_url"  // POST /api/upload/signed-url
	RouteStoragePut  = "storage_put" // PUT {signedUrl}
	RoutePublish     = "publish"     // POST /api/splats/publish
	RouteGetSplat    = "get_splat"   // GET /api/splats/{id}
	RouteCheckpoints = "checkpoints" // GET /api/branches/{branchId}/checkpoints

	// SuperSplat API v1, under {base_url}/api/supersplat (docs/api-v1.md).
	RouteV1Me           = "v1_me"            // GET /v1/me
	RouteV1Splats       = "v1_splats"        // GET /v1/splats
	RouteV1GetSplat     = "v1_get_splat"     // GET /v1/splats/{splatId}
	RouteV1CreateUpload = "v1_create_upload" // POST /v1/splats/uploads
	RouteV1GetUpload    = "v1_get_upload"    // GET /v1/splats/uploads/{uploadId}
	RouteV1PartURLs     = "v1_part_urls"     // POST /v1/splats/uploads/{uploadId}/part-upload-urls
	RouteV1Complete     = "v1_complete"      // POST /v1/splats/uploads/{uploadId}/complete
	RouteV1PartPut      = "v1_part_put"      // PUT {part url}: object storage, not paced
)

// Routes lists every route name, for metrics to pre-initialise its series.
var Routes = []string{
	RouteSignedURL, RouteStoragePut, RoutePublish, RouteGetSplat, RouteCheckpoints,
	RouteV1Me, RouteV1Splats, RouteV1GetSplat, RouteV1CreateUpload, RouteV1GetUpload,
	RouteV1PartURLs, RouteV1Complete, RouteV1PartPut,
}

// Key field names of the signed-URL response. docs/api-legacy.md says storageKey,
// the public documentation and editor say s3Key; publish must get the key back
// under the name it arrived with.
const (
	KeyFieldStorageKey = "storageKey"
	KeyFieldS3Key      = "s3Key"
)

// Upload is the answer of the signed-URL call: where to PUT the file and the
// storage key to publish afterwards.
type Upload struct {
	URL      string    // the signed URL; its query is a credential: never log it
	Key      string    // storage key
	KeyField string    // KeyFieldStorageKey or KeyFieldS3Key: echoed back to publish
	IssuedAt time.Time // local time the URL was received (signed URLs expire)
}

// PublishRequest is the body of the publish call.
type PublishRequest struct {
	Key, KeyField string // from Upload; an empty KeyField means storageKey
	// The publish fields: Format is the output format ("sog" |
	// "compressed.ply", omitted when empty); Settings the experience
	// settings, sent as a JSON object (omitted when nil).
	state.PublishParams
}

// Task is the processing task of a splat.
type Task struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Splat is a splat record as returned by publish and get-splat. Decoding is
// tolerant (see docs/api-legacy.md): the id and version keep the string form of a
// JSON number, and fields whose type or name varies never fail a decode.
type Splat struct {
	ID          string     `json:"id"`
	Hash        string     `json:"hash"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Format      string     `json:"format"`
	URL         string     `json:"url"` // viewer link {viewer_url}/view?id=<hash>
	Version     string     `json:"version"`
	Task        Task       `json:"task"`
	CreatedAt   time.Time  `json:"createdAt"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`

	// Observed extras, decoded for completeness; nothing depends on them.
	Listed        bool   `json:"listed"`
	ReleaseNotes  string `json:"releaseNotes,omitempty"` // releaseNotes or release_notes
	HasThumbnails bool   `json:"hasThumbnails"`          // hasThumbnails, or thumbnails > 0

	// NoTask is set when the record carries no task object at all: docs/api-legacy.md
	// promises only id, hash, title, description and format from get-splat.
	NoTask bool `json:"-"`
}

// Outcome is what a splat's task status means to a poller.
type Outcome int

// Outcomes of Splat.Outcome. The zero value is OutcomeUnknown so that an
// unset Outcome never reads as a decision.
const (
	// OutcomeUnknown: a status this client does not know; keep polling until
	// the poll timeout and report the value seen.
	OutcomeUnknown Outcome = iota
	// OutcomePending: processing has not finished.
	OutcomePending
	// OutcomeDone: processing finished successfully.
	OutcomeDone
	// OutcomeFailed: processing failed; Task.Message says why.
	OutcomeFailed
)

// String returns "unknown", "pending", "done" or "failed".
func (o Outcome) String() string {
	switch o {
	case OutcomePending:
		return "pending"
	case OutcomeDone:
		return "done"
	case OutcomeFailed:
		return "failed"
	}
	return "unknown"
}

// Outcome classifies Task.Status. Only `running` is documented, so the sets
// below are the defensive lists of docs/api-legacy.md, compared case-insensitively.
// A record with no status but completedAt set and no message is done: some
// servers clear the task once it finishes.
func (s Splat) Outcome() Outcome {
	switch strings.ToLower(strings.TrimSpace(s.Task.Status)) {
	case "running", "pending", "queued", "processing", "created", "uploading":
		return OutcomePending
	case "complete", "completed", "done", "success", "succeeded":
		return OutcomeDone
	case "failed", "failure", "error", "errored", "canceled", "cancelled":
		return OutcomeFailed
	case "":
		if s.CompletedAt != nil && strings.TrimSpace(s.Task.Message) == "" {
			return OutcomeDone
		}
		// A minimal record (no task): the format is empty while processing
		// runs and names the output once it is done.
		if s.NoTask && strings.TrimSpace(s.Format) != "" {
			return OutcomeDone
		}
	}
	return OutcomeUnknown
}

// Checkpoint is one element of a branch's checkpoint list.
type Checkpoint struct {
	ID   string `json:"id"` // also the skip cursor of the next page
	User struct {
		ID       int64  `json:"id"`
		FullName string `json:"fullName"`
		Username string `json:"username"`
	} `json:"user"`
	CreatedAt   time.Time `json:"createdAt"`
	Description string    `json:"description"`
}

// CheckpointPage is one page of the checkpoint list, newest first. When
// HasMore is true, pass the last checkpoint's ID as skip for the next page.
type CheckpointPage struct {
	Checkpoints []Checkpoint
	HasMore     bool
}

// --- tolerant JSON scalars -------------------------------------------------
//
// The API is in beta and its records have been observed with other types than
// its schema declares. These scalars accept any JSON value and keep what they
// can, so that an unexpected type costs a field, never a job.

// jsonText decodes a string, or the literal text of a number or boolean
// (50 → "50"). null, objects and arrays decode as "".
type jsonText string

func (s *jsonText) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0, b[0] == 'n', b[0] == '{', b[0] == '[':
		*s = ""
	case b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = jsonText(v)
	default:
		*s = jsonText(b)
	}
	return nil
}

// jsonInt decodes a number or a numeric string; anything else is 0.
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	var t jsonText
	_ = t.UnmarshalJSON(b)
	s := strings.TrimSpace(string(t))
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = jsonInt(v)
		return nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && math.Abs(f) < math.MaxInt64 {
		*n = jsonInt(f)
		return nil
	}
	*n = 0
	return nil
}

// jsonBool decodes true/false, a number (non-zero is true) or a string
// holding either.
type jsonBool bool

func (v *jsonBool) UnmarshalJSON(b []byte) error {
	var t jsonText
	_ = t.UnmarshalJSON(b)
	s := strings.ToLower(strings.TrimSpace(string(t)))
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*v = f != 0
		return nil
	}
	*v = s == "true"
	return nil
}

// jsonTime decodes an RFC 3339 string or epoch seconds/milliseconds; null or
// anything unparsable leaves it unset.
type jsonTime struct {
	t  time.Time
	ok bool
}

func (v *jsonTime) UnmarshalJSON(b []byte) error {
	*v = jsonTime{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == 'n' || b[0] == '{' || b[0] == '[' {
		return nil
	}
	var t jsonText
	_ = t.UnmarshalJSON(b)
	s := strings.TrimSpace(string(t))
	if b[0] != '"' {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 || math.IsInf(f, 0) {
			return nil
		}
		if f > 1e11 { // milliseconds: 1e11 s is the year 5138
			v.t = time.UnixMilli(int64(f)).UTC()
		} else {
			v.t = time.Unix(int64(f), 0).UTC()
		}
		v.ok = true
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05"} {
		if pt, err := time.Parse(layout, s); err == nil {
			v.t, v.ok = pt, true
			return nil
		}
	}
	return nil
}

// wireTask accepts the documented object, or a bare status string.
type wireTask struct {
	Status  jsonText
	Message jsonText
}

func (w *wireTask) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*w = wireTask{}
	if len(b) == 0 {
		return nil
	}
	if b[0] != '{' {
		return w.Status.UnmarshalJSON(b)
	}
	var o struct {
		Status  jsonText `json:"status"`
		Message jsonText `json:"message"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	w.Status, w.Message = o.Status, o.Message
	return nil
}

// wireSplat is the splat record as it may arrive.
type wireSplat struct {
	ID                jsonText  `json:"id"`
	Hash              jsonText  `json:"hash"`
	Title             jsonText  `json:"title"`
	Description       jsonText  `json:"description"`
	Format            jsonText  `json:"format"`
	URL               jsonText  `json:"url"`
	Version           jsonText  `json:"version"`
	Task              *wireTask `json:"task"` // nil: the record has no task (docs/api-legacy.md's minimal get-splat)
	CreatedAt         jsonTime  `json:"createdAt"`
	CompletedAt       jsonTime  `json:"completedAt"`
	Listed            jsonBool  `json:"listed"`
	ReleaseNotes      jsonText  `json:"releaseNotes"`
	ReleaseNotesSnake jsonText  `json:"release_notes"`
	Thumbnails        jsonInt   `json:"thumbnails"`
	HasThumbnails     jsonBool  `json:"hasThumbnails"`
}

func (w *wireSplat) splat() Splat {
	s := Splat{
		ID:            strings.TrimSpace(string(w.ID)),
		Hash:          string(w.Hash),
		Title:         string(w.Title),
		Description:   string(w.Description),
		Format:        string(w.Format),
		URL:           string(w.URL),
		Version:       string(w.Version),
		Listed:        bool(w.Listed),
		ReleaseNotes:  string(w.ReleaseNotes),
		HasThumbnails: bool(w.HasThumbnails) || w.Thumbnails > 0,
	}
	if w.Task != nil {
		s.Task = Task{Status: string(w.Task.Status), Message: string(w.Task.Message)}
	} else {
		s.NoTask = true
	}
	if s.ReleaseNotes == "" {
		s.ReleaseNotes = string(w.ReleaseNotesSnake)
	}
	if w.CreatedAt.ok {
		s.CreatedAt = w.CreatedAt.t
	}
	if w.CompletedAt.ok {
		t := w.CompletedAt.t
		s.CompletedAt = &t
	}
	return s
}

// wireSigned is the signed-URL response.
type wireSigned struct {
	SignedURL  jsonText  `json:"signedUrl"`
	StorageKey *jsonText `json:"storageKey"`
	S3Key      *jsonText `json:"s3Key"`
}

type wireCheckpoint struct {
	ID          jsonText `json:"id"`
	User        wireUser `json:"user"`
	CreatedAt   jsonTime `json:"createdAt"`
	Description jsonText `json:"description"`
}

// wireUser is a checkpoint's creator; anything but an object decodes empty.
type wireUser struct {
	ID       jsonInt
	FullName jsonText
	Username jsonText
}

func (u *wireUser) UnmarshalJSON(b []byte) error {
	*u = wireUser{}
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return nil
	}
	var o struct {
		ID       jsonInt  `json:"id"`
		FullName jsonText `json:"fullName"`
		Username jsonText `json:"username"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*u = wireUser(o)
	return nil
}

type wireCheckpointPage struct {
	Result     []json.RawMessage `json:"result"`
	Pagination struct {
		HasMore jsonBool `json:"hasMore"`
	} `json:"pagination"`
}

func (w *wireCheckpoint) checkpoint() Checkpoint {
	var c Checkpoint
	c.ID = strings.TrimSpace(string(w.ID))
	c.User.ID = int64(w.User.ID)
	c.User.FullName = string(w.User.FullName)
	c.User.Username = string(w.User.Username)
	if w.CreatedAt.ok {
		c.CreatedAt = w.CreatedAt.t
	}
	c.Description = string(w.Description)
	return c
}

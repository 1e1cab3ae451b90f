package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// The status endpoints (/api/status, /api/jobs and the page at /) are
// read-only, and the types below are views holding only what is shown, so no
// token or signed URL reaches a response through a field left set. The
// handlers scrub the free texts (errors, advice) once more before encoding.

// StatusSource is what the status endpoints read; the daemon implements it.
// Both methods are called once per request, from the request's goroutine,
// and must not block on the network: they read in-memory state and the job
// store.
type StatusSource interface {
	// Status returns the daemon's current state. Ready is ignored: the
	// server fills it from ServerOptions.Ready, the same answer /readyz gives.
	Status(ctx context.Context) (Status, error)
	// Jobs returns at most q.Limit jobs whose stage is one of q.Stages (all
	// stages when empty), most recently updated first, and how many jobs
	// match in all.
	Jobs(ctx context.Context, q JobQuery) (JobList, error)
}

// JobQuery selects jobs for StatusSource.Jobs.
type JobQuery struct {
	// Stages to include; empty means every stage.
	Stages []state.Stage
	// Limit is the most jobs to return, at least 1.
	Limit int
}

// JobList is a page of jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
	// Total counts the jobs that match the query, returned or not.
	Total int `json:"total"`
}

// Status is the body of /api/status.
type Status struct {
	Version string `json:"version"`
	// Protocol is api.protocol: "legacy" or "v1".
	Protocol string   `json:"protocol"`
	Watched  []Folder `json:"watched"`
	Token    Token    `json:"token"`
	// Pacing has one entry per rate-limit class seen so far.
	Pacing    []Pacing  `json:"pacing"`
	Bandwidth Bandwidth `json:"bandwidth"`
	// Queue counts jobs per stage; every stage of state.Stages is present.
	Queue map[state.Stage]int `json:"queue"`
	Ready Readiness           `json:"ready"`
	// Backlog is what is left to publish: the jobs not yet final.
	Backlog Backlog `json:"backlog"`
	// Today is the work done since local midnight.
	Today Today `json:"today"`
	// Settling lists the files seen but not yet finished (still being
	// written, or quiet for less than settle).
	Settling []Settling `json:"settling"`
	// Throughput is the bytes sent in each minute of the last hour,
	// oldest first, the current minute last.
	Throughput []int64 `json:"throughput"`
	// Events is the latest job events, newest first (at most 100).
	Events []Event `json:"events"`
	// Time is when the status was taken.
	Time time.Time `json:"time"`
}

// Folder is one watch root.
type Folder struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	// Polling is true while the root runs on the polling fallback.
	Polling bool `json:"polling,omitempty"`
	// LastScan is when the folder's latest full scan ended; zero before
	// the first.
	LastScan time.Time `json:"last_scan,omitzero"`
	// Error says why the folder cannot be scanned now ("" while it can).
	Error string `json:"error,omitempty"`
	// Jobs counts the folder's jobs by what they are doing.
	Jobs FolderJobs `json:"jobs"`
}

// FolderJobs counts one folder's jobs: waiting (queued, not yet
// started), active (between ready and processing), done, failed (failed
// or held).
type FolderJobs struct {
	Waiting int `json:"waiting"`
	Active  int `json:"active"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
}

// Backlog is the jobs not yet final and the bytes of their files.
type Backlog struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// Today is the day's work: bytes sent to storage (counted by this process,
// since Since), files published and their bytes (from the job store).
type Today struct {
	Sent           int64     `json:"sent_bytes"`
	Since          time.Time `json:"since"`
	Published      int       `json:"published"`
	PublishedBytes int64     `json:"published_bytes"`
}

// Settling is a file the watcher has seen and waits on: it becomes a job
// once it has been quiet for settle.
type Settling struct {
	Path   string `json:"path"`
	Folder string `json:"folder"`
	Size   int64  `json:"size"`
	// Since is when the watcher first saw it; Changed its latest change.
	Since   time.Time `json:"since"`
	Changed time.Time `json:"changed"`
}

// TokenState says whether the API accepts the token.
type TokenState string

// The token states.
const (
	// TokenUnknown: no authenticated API call has been answered yet.
	TokenUnknown TokenState = "unknown"
	// TokenOK: the API accepted the token on its last use.
	TokenOK TokenState = "ok"
	// TokenRefused: the API refused the token; the workers are paused.
	TokenRefused TokenState = "refused"
)

// Token is the state of the API token, never the token itself.
type Token struct {
	State TokenState `json:"state"`
	// Advice tells the operator what to do when the token is refused,
	// e.g. which file to replace.
	Advice string `json:"advice,omitempty"`
}

// Pacing is the rate-limit pacer's view of one limit class.
type Pacing struct {
	Class     string `json:"class"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	// Reset is when the budget refills; zero when not known.
	Reset time.Time `json:"reset,omitzero"`
	// Waiting counts requests the pacer is holding back right now.
	Waiting int `json:"waiting"`
	// Parked counts jobs whose request this class's window would have held
	// (not sent): they wait in their stage, holding no worker, until it ends.
	Parked int `json:"parked"`
}

// Bandwidth is the upload bandwidth limit and the current aggregate rate.
type Bandwidth struct {
	// Limit is the limit in force in bytes per second (upload.bandwidth as
	// last reloaded, at this hour of its timetable); 0 means none.
	Limit int64 `json:"limit_bytes_per_second"`
	// Rate is the recent aggregate upload rate in bytes per second.
	Rate float64 `json:"rate_bytes_per_second"`
	// InFlight is the bytes of the uploads in progress still to be sent.
	InFlight int64 `json:"in_flight_bytes"`
}

// Readiness is /readyz as data.
type Readiness struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
}

// Job is the view of one job.
type Job struct {
	ID     uint64 `json:"id"`
	Path   string `json:"path"`
	Folder string `json:"folder,omitempty"`
	// Size is the file's size once its check has read it.
	Size int64 `json:"size,omitempty"`
	// Stage is the job's stage in the state, the word `splatd jobs` and
	// the log use; Activity says what it does in that stage now
	// (Activity, the one place those words are made).
	Stage    state.Stage `json:"stage"`
	Activity string      `json:"activity,omitempty"`
	Attempts int         `json:"attempts"`
	// NextTry is when a job waiting out a backoff is tried again.
	NextTry time.Time `json:"next_try,omitzero"`
	// Progress is set while the file is being uploaded.
	Progress *Progress `json:"progress,omitempty"`
	// Check is set while the job's check reads its content, its stage
	// still queued: hashing its file, bundling its SOG folder, encoding it
	// (publish.encode); its Step says which, its Sent the bytes done.
	Check *Progress `json:"check,omitempty"`
	// DuplicateOf is the job that published the same content first: this
	// job published nothing, its link is that job's splat.
	DuplicateOf uint64 `json:"duplicate_of,omitempty"`
	// Adopted: recorded as done from its receipt, not published by this
	// daemon's state.
	Adopted    bool   `json:"adopted,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	FailReason string `json:"fail_reason,omitempty"`
	// EncodeSkipped says why publish.encode's encoding was not made: the
	// file is (or was) sent as it is.
	EncodeSkipped string `json:"encode_skipped,omitempty"`
	// ViewerURL is the public viewer link of a published splat.
	ViewerURL string    `json:"viewer_url,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Progress is how much of a file's upload has been sent, the recent rate
// and the time left at that rate (absent while unknown); for a check, how
// much of its read is done, Step naming it ("hashing").
type Progress struct {
	Step string  `json:"step,omitempty"`
	Sent int64   `json:"sent"`
	Size int64   `json:"size"`
	Rate float64 `json:"rate_bytes_per_second"`
	ETA  float64 `json:"eta_s,omitempty"`
}

// JobFromState returns the view of j. It copies no field of j.Upload (the
// signed URL is a bearer secret) and leaves Progress nil: upload progress
// lives in the workers, not in the store.
func JobFromState(j state.Job) Job {
	return Job{
		ID:            j.ID,
		Path:          state.Shown(j.Path),
		Folder:        j.Root,
		Size:          j.Size,
		Stage:         j.Stage,
		Attempts:      j.Attempts,
		DuplicateOf:   j.DuplicateOf,
		Adopted:       j.Adopted,
		LastError:     j.LastError,
		FailReason:    j.FailReason,
		EncodeSkipped: j.EncodeSkipped,
		ViewerURL:     j.ViewerURL,
		UpdatedAt:     j.UpdatedAt,
	}
}

// Job list bounds: a page asks for a few dozen jobs; a script that wants
// more says so, up to maxJobLimit, so that a state of 10,000 jobs is never
// serialised in one answer unasked.
const (
	defaultJobLimit = 200
	maxJobLimit     = 1000
)

func (s *Server) apiStatus(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeJSONError(w, http.StatusBadRequest, "/api/status takes no query parameters")
		return
	}
	st, err := s.opts.Status.Status(r.Context())
	if err != nil {
		s.sourceError(w, "status", err)
		return
	}
	st.Ready = s.readiness()
	if s.opts.Events != nil && st.Events == nil {
		st.Events = s.opts.Events.List()
	}
	writeJSON(w, http.StatusOK, cleanStatus(st))
}

func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request) {
	q, err := parseJobQuery(r.URL.RawQuery)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	list, err := s.opts.Status.Jobs(r.Context(), q)
	if err != nil {
		s.sourceError(w, "jobs", err)
		return
	}
	// The source promised at most Limit; a source that ignores it still
	// does not get to send 10,000 jobs.
	if len(list.Jobs) > q.Limit {
		list.Jobs = list.Jobs[:q.Limit]
	}
	if list.Jobs == nil {
		list.Jobs = []Job{}
	}
	for i := range list.Jobs {
		list.Jobs[i] = cleanJob(list.Jobs[i])
	}
	writeJSON(w, http.StatusOK, list)
}

// parseJobQuery reads stage (repeated or comma-separated stage names) and
// limit. Unknown parameters are refused rather than ignored: a script that
// misspells "stage" would otherwise silently get every job.
func parseJobQuery(raw string) (JobQuery, error) {
	q := JobQuery{Limit: defaultJobLimit}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, fmt.Errorf("query: %w", err)
	}
	for key, vs := range vals {
		switch key {
		case "stage":
			for _, v := range vs {
				for _, name := range strings.Split(v, ",") {
					st := state.Stage(strings.TrimSpace(name))
					if st == "" {
						continue
					}
					if !st.Valid() {
						return q, fmt.Errorf("unknown stage %q; stages are %s", name, stageNames())
					}
					q.Stages = append(q.Stages, st)
				}
			}
		case "limit":
			if len(vs) != 1 {
				return q, errors.New("limit given more than once")
			}
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 1 || n > maxJobLimit {
				return q, fmt.Errorf("limit %q: want a whole number from 1 to %d", vs[0], maxJobLimit)
			}
			q.Limit = n
		default:
			return q, fmt.Errorf("unknown query parameter %q; /api/jobs takes stage and limit", key)
		}
	}
	return q, nil
}

func stageNames() string {
	names := make([]string, len(state.Stages))
	for i, s := range state.Stages {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// readiness is ServerOptions.Ready as data; an error made by errors.Join
// gives one reason per joined error.
func (s *Server) readiness() Readiness {
	if s.opts.Ready == nil {
		return Readiness{Ready: true}
	}
	err := s.opts.Ready()
	if err == nil {
		return Readiness{Ready: true}
	}
	var reasons []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil {
				reasons = append(reasons, e.Error())
			}
		}
	}
	if len(reasons) == 0 {
		reasons = []string{err.Error()}
	}
	return Readiness{Ready: false, Reasons: reasons}
}

// sourceError answers 500 for a failing StatusSource. The error may come
// from the store or the pacer, so its text is scrubbed like any other.
func (s *Server) sourceError(w http.ResponseWriter, what string, err error) {
	msg := state.ScrubText(err.Error())
	s.opts.Logger.Error().Str("endpoint", what).Str("error", msg).Msg("status source failed")
	writeJSONError(w, http.StatusInternalServerError, what+": "+msg)
}

// cleanStatus scrubs the free texts of st and fills in every known stage.
func cleanStatus(st Status) Status {
	st.Token.Advice = state.ScrubText(st.Token.Advice)
	if st.Token.State == "" {
		st.Token.State = TokenUnknown
	}
	reasons := make([]string, len(st.Ready.Reasons))
	for i, r := range st.Ready.Reasons {
		reasons[i] = state.ScrubText(r)
	}
	st.Ready.Reasons = reasons
	queue := make(map[state.Stage]int, len(state.Stages))
	for _, s := range state.Stages {
		queue[s] = 0
	}
	for s, n := range st.Queue {
		queue[s] = n
	}
	st.Queue = queue
	if st.Watched == nil {
		st.Watched = []Folder{}
	}
	if st.Pacing == nil {
		st.Pacing = []Pacing{}
	}
	if st.Settling == nil {
		st.Settling = []Settling{}
	}
	if st.Throughput == nil {
		st.Throughput = []int64{}
	}
	events := make([]Event, len(st.Events))
	for i, e := range st.Events {
		e.Text = state.ScrubText(e.Text)
		events[i] = e
	}
	st.Events = events
	st.Watched = slices.Clone(st.Watched)
	for i := range st.Watched {
		st.Watched[i].Error = state.ScrubText(st.Watched[i].Error)
	}
	if r := st.Bandwidth.Rate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		st.Bandwidth.Rate = 0
	}
	return st
}

// cleanJob scrubs the free texts of j and reduces its viewer link to what
// opens the scene.
func cleanJob(j Job) Job {
	j.Activity = state.ScrubText(j.Activity)
	j.LastError = state.ScrubText(j.LastError)
	j.FailReason = state.ScrubText(j.FailReason)
	j.EncodeSkipped = state.ScrubText(j.EncodeSkipped)
	j.ViewerURL = viewerLink(j.ViewerURL)
	return j
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Unreachable for the view types; answered rather than panicking.
		writeJSONError(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

package daemon

import (
	"fmt"
	"strings"
	"time"

	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/pace"
)

// JobView is a job as the CLI shows it: no signed URL, no settings.
type JobView struct {
	ID          uint64     `json:"id"`
	File        string     `json:"file"`                 // state.Shown: escaped for a terminal
	FileBytes   []byte     `json:"file_bytes,omitempty"` // the name's bytes, when File is escaped
	Stage       string     `json:"stage"`
	Attempts    int        `json:"attempts"`
	Size        int64      `json:"size"`
	ModTime     time.Time  `json:"mod_time,omitzero"`
	SHA256      string     `json:"sha256,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Activity says what the job does in its stage now, in the words of
	// /api/jobs and the status page ("uploading 1.2 GiB of 2.9 GiB (41 %),
	// 24.0 MiB/s, ETA 72 s", "next try in 12 s"; metrics.Activity).
	Activity string `json:"activity,omitempty"`
	// Sent, Rate and ETA describe a running upload: bytes sent, recent
	// bytes per second, seconds left at that rate (absent: unknown).
	Sent int64   `json:"sent,omitempty"`
	Rate float64 `json:"rate_bytes_per_second,omitempty"`
	ETA  float64 `json:"eta_s,omitempty"`
	// Checking says what the job's check does now, a long read of its
	// content ("hashing" its file, "bundling" its SOG folder, "encoding"
	// it for publish.encode) while
	// it is still queued; Checked, CheckSize,
	// CheckRate and CheckETA are that read's bytes done, total, recent
	// bytes per second and seconds left at that rate, as for an upload.
	Checking    string  `json:"checking,omitempty"`
	Checked     int64   `json:"checked,omitempty"`
	CheckSize   int64   `json:"check_size,omitempty"`
	CheckRate   float64 `json:"check_rate_bytes_per_second,omitempty"`
	CheckETA    float64 `json:"check_eta_s,omitempty"`
	SplatID     string  `json:"splat_id,omitempty"`
	URL         string  `json:"url,omitempty"`
	Error       string  `json:"error,omitempty"`
	DuplicateOf uint64  `json:"duplicate_of,omitempty"`
	// EncodeSkipped: why publish.encode's encoding was not made (the file
	// itself is uploaded).
	EncodeSkipped string `json:"encode_skipped,omitempty"`
	// Adopted: recorded as done from its receipt, not published by this
	// state directory.
	Adopted bool `json:"adopted,omitempty"`
	// Parked: why the job waits on another daemon of a fleet, holding no
	// worker (next_attempt says when it is looked at again).
	Parked string `json:"parked,omitempty"`
	// RateLimit: why the job's next API request waits on the token's rate
	// limit now, in which class and until when ("strict: no request left
	// in the window, until 20:31:05 UTC"), whether the pacer delays it in
	// its worker (a short wait, or one that ends with an answer in flight)
	// or the job was parked on it without a worker (next_attempt is the
	// same time); RateLimitUntil is that time (absent: when the answer in
	// flight comes).
	RateLimit      string     `json:"rate_limit,omitempty"`
	RateLimitUntil *time.Time `json:"rate_limit_until,omitempty"`
	// WaitingFor: the job is due, but every worker is busy with another
	// ("a free worker (2 of 2 busy, 2 delayed by the rate limit)").
	WaitingFor string `json:"waiting_for,omitempty"`
	// AfterAction and AfterError: the after-action (receipt, move, delete)
	// of a final job keeps failing; AfterRetry is its next attempt.
	AfterAction string     `json:"after_action,omitempty"`
	AfterError  string     `json:"after_error,omitempty"`
	AfterRetry  *time.Time `json:"after_retry,omitempty"`
}

// StageUploading is the -state word that selects the signed jobs whose
// bytes are going out; their stage stays signed.
const StageUploading = "uploading"

// Live is what the workers know of the jobs they run, by job id: the
// uploads' progress, the checks' (a hash, a bundle, an encoding) and the
// requests the pacer delays. The zero Live is a state read without a
// daemon.
type Live struct {
	Progress map[uint64]uploader.Progress
	Checks   map[uint64]uploader.Progress
	Delays   map[uint64]pace.Delay // the requests the pacer delays now
	Running  map[uint64]bool       // the jobs the workers hold
	Workers  int
	// Paused is what every job waits for while the pool is paused (a
	// refused token, a configuration error), "" while it runs.
	Paused string
}

// LiveOf returns the pool's view of its running jobs.
func LiveOf(p *uploader.Pool) Live {
	running, workers := p.Busy()
	l := Live{Progress: p.Progress(), Checks: p.CheckProgress(), Delays: p.RateDelays(), Running: running, Workers: workers}
	if err := p.Paused(); err != nil {
		l.Paused = "the API to accept the token (all work is paused): " + err.Error()
	} else if err, kind, _ := p.ConfigError(); err != nil {
		l.Paused = "the configuration error (" + kind + ") to clear (all work is paused): " + err.Error()
	}
	return l
}

// Check returns the progress of j's check while it reads j's content (a
// hash, a bundle, an encoding), if one runs.
func (l Live) Check(j state.Job) (uploader.Progress, bool) {
	p, ok := l.Checks[j.ID]
	if !ok || j.Stage.Final() || p.Size <= 0 {
		return uploader.Progress{}, false
	}
	return p, true
}

// WorkerWait says that j waits for the paused pool (Paused), or is due
// but every worker is busy with another job ("a free worker (2 of 2 busy,
// 2 delayed by the rate limit)"), "" otherwise:
// without it such a job showed no reason while the pacer held the workers.
func (l Live) WorkerWait(j state.Job, now time.Time) string {
	if l.Paused != "" && !j.Stage.Final() && j.Parked == "" && !l.Running[j.ID] {
		return l.Paused
	}
	if l.Workers <= 0 || len(l.Running) < l.Workers || l.Running[j.ID] || j.Stage.Final() || j.Parked != "" || j.NextAttempt.After(now) {
		return ""
	}
	s := fmt.Sprintf("a free worker (%d of %d busy", len(l.Running), l.Workers)
	if n := len(l.Delays); n > 0 {
		s += fmt.Sprintf(", %d delayed by the rate limit", n)
	}
	return s + ")"
}

// RateDelay returns why j waits on the rate limit now: the pacer delaying
// its running step's request, or the delay it was parked on (holding no
// worker) until that delay's end.
func (l Live) RateDelay(j state.Job, now time.Time) (pace.Delay, bool) {
	if j.Stage.Final() {
		return pace.Delay{}, false
	}
	if d, ok := l.Delays[j.ID]; ok {
		return d, true
	}
	if w := j.RateLimited; w != nil && j.NextAttempt.After(now) {
		return pace.Delay{Class: w.Class, Reason: w.Reason, Until: w.Until}, true
	}
	return pace.Delay{}, false
}

// DelayText is how a job's wait on the rate limit reads.
func DelayText(d pace.Delay) string {
	s := d.Class + ": " + d.Reason
	if !d.Until.IsZero() {
		s += ", until " + d.Until.UTC().Format(time.TimeOnly) + " UTC"
	}
	return s
}

// Name is the job's file name as its bytes.
func (v JobView) Name() string {
	if v.FileBytes != nil {
		return string(v.FileBytes)
	}
	return v.File
}

// ViewOf returns the view of j; prog is its running upload, if any.
func ViewOf(j state.Job, prog *uploader.Progress) JobView {
	v := JobView{
		ID: j.ID, Stage: string(j.Stage), Attempts: j.Attempts, Size: j.Size, ModTime: j.ModTime, SHA256: j.SHA256,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, SplatID: j.SplatID, URL: j.ViewerURL,
		DuplicateOf: j.DuplicateOf, Adopted: j.Adopted, Parked: j.Parked,
		AfterAction: j.AfterAction, AfterError: j.AfterError, EncodeSkipped: j.EncodeSkipped,
	}
	v.File, v.FileBytes = state.ShownName(j.Path)
	if j.AfterError != "" && !j.AfterRetry.IsZero() {
		t := j.AfterRetry
		v.AfterRetry = &t
	}
	if !j.Stage.Final() && !j.NextAttempt.IsZero() {
		t := j.NextAttempt
		v.NextAttempt = &t
	}
	if prog != nil && !j.Stage.Final() {
		v.Sent, v.Rate = prog.Sent, prog.Rate
		v.ETA = prog.ETA.Round(time.Second).Seconds()
		v.NextAttempt = nil
	}
	live := Live{}
	if prog != nil {
		live.Progress = map[uint64]uploader.Progress{j.ID: *prog}
	}
	v.Activity = metrics.Activity(j.Stage, live.doing(j, time.Now()), time.Now())
	switch {
	case j.FailReason != "":
		v.Error = j.FailReason
	case j.LastError != "":
		// The content check's errors start with the path, which the FILE
		// column already shows.
		v.Error = strings.TrimPrefix(j.LastError, j.Path+": ")
	}
	return v
}

// ListViews lists the jobs in the given stages (comma-separated; empty:
// all), "uploading" selecting the jobs whose upload is running.
func ListViews(src JobSource, stage string, live Live) ([]JobView, error) {
	var f queue.Filter
	var uploading, stored bool
	for _, s := range strings.Split(stage, ",") {
		switch s = strings.TrimSpace(s); {
		case s == "":
		case s == StageUploading:
			uploading = true
		case state.Stage(s).Valid():
			stored = true
			f.Stages = append(f.Stages, state.Stage(s))
		default:
			return nil, fmt.Errorf("unknown stage %q (stages: %s)", s, StageNames())
		}
	}
	if uploading && !stored {
		f.Stages = []state.Stage{state.Signed}
	}
	jobs, err := src.List(f)
	if err != nil {
		return nil, err
	}
	views := make([]JobView, 0, len(jobs))
	now := time.Now()
	for _, j := range jobs {
		var prog *uploader.Progress
		if p, ok := live.Progress[j.ID]; ok {
			prog = &p
		}
		v := ViewOf(j, prog)
		if c, ok := live.Check(j); ok {
			v.Checking, v.Checked, v.CheckSize = c.Step, c.Sent, c.Size
			v.CheckRate, v.CheckETA = c.Rate, c.ETA.Round(time.Second).Seconds()
		}
		v.WaitingFor = live.WorkerWait(j, now)
		if d, ok := live.RateDelay(j, now); ok {
			v.RateLimit = DelayText(d)
			if !d.Until.IsZero() {
				until := d.Until.UTC()
				v.RateLimitUntil = &until
			}
		}
		v.Activity = metrics.Activity(j.Stage, live.doing(j, now), now)
		if uploading && !stored && prog == nil {
			continue
		}
		views = append(views, v)
	}
	return views, nil
}

// StageNames lists the stages a -state filter takes.
func StageNames() string {
	names := make([]string, 0, len(state.Stages)+1)
	for _, s := range state.Stages {
		names = append(names, string(s))
		if s == state.Signed {
			names = append(names, StageUploading)
		}
	}
	return strings.Join(names, ", ")
}

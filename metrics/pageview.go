package metrics

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// The status page is rendered on the server, the only place its markup is
// made: its script refreshes it by fetching the page again and putting the
// new <main> in place, and carries out the actions.

// pageRefresh is how often the page's script refreshes it (REFRESH_MS).
const pageRefresh = 5 * time.Second

// pageList is one of the page's job lists: its stages and limit, and the
// query that lists them all in /api/jobs.
type pageList struct {
	stages []state.Stage
	limit  int
	query  string
}

var (
	pageActive    = pageList{[]state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing}, 50, "stage=ready,signed,uploaded,publishing,processing"}
	pageQueued    = pageList{[]state.Stage{state.Queued}, 5, "stage=queued"}
	pagePublished = pageList{[]state.Stage{state.Done}, 10, "stage=done"}
	pageFailures  = pageList{[]state.Stage{state.Failed, state.Held}, 50, "stage=failed,held"}
)

// maxSettlingShown bounds the files being written the page lists (a copy of
// a thousand files is a thousand of them).
const maxSettlingShown = 10

// pageView is what the page template renders.
type pageView struct {
	Loaded         bool   // every part was read: body data-loaded
	Conn           string // the line under the title
	ConnClass      string
	CSRF           string
	Actions        bool // the page offers actions
	Status         Status
	Ready          bool
	TokenClass     string
	Bandwidth      string
	Stages         []pageStage // the stages holding jobs
	Uploading      int
	Failing        int
	Backlog        string
	TodaySent      string
	TodayPublished string
	Spark          pageSpark
	Settling       []pageSettling
	SettlingMore   int // files being written beyond those listed
	Folders        []pageFolder
	Pacing         []pagePacing
	Active         pageRows
	Queued         pageRows // the latest few of the backlog
	Published      pageRows
	Failures       pageRows
	Events         []pageEvent
	// EventFolders and EventStages are the history's filter choices.
	EventFolders []string
	EventStages  []state.Stage
}

type pageStage struct {
	Stage state.Stage
	Jobs  int
}

type pagePacing struct {
	Pacing
	Reset pageTime
}

// pageSpark is the throughput sparkline: an SVG polyline over the last
// hour, one point a minute.
type pageSpark struct {
	Points string
	Peak   string // the busiest minute's rate
	Now    string // the current minute's rate so far
}

type pageSettling struct {
	Settling
	Text    string // "being written, 1.2 GiB so far"
	Changed pageTime
}

type pageFolder struct {
	Folder
	State   string
	Class   string
	Scanned pageTime
}

type pageEvent struct {
	Event
	At pageTime
}

// pageRows is one rendered job list and its "showing N of M" line.
type pageRows struct {
	Jobs     []pageJob
	Shown    int
	Total    int
	MoreHref template.URL // a constant query: safe as a URL
	MoreText string
}

type pageJob struct {
	Job
	Updated  pageTime
	SizeText string
	Reason   string // fail_reason, else last_error
	Viewer   string // an http(s) link, or ""
	Progress *pageProgress
	Actions  []string
}

type pageProgress struct {
	Sent, Size int64
	Label      string // the bar's aria-label
}

// pageTime is a time cell: the exact time as its title, "12 s ago" shown.
type pageTime struct {
	Title string
	Text  string
}

// pageView reads the source and builds the page. A part that cannot be
// read leaves its table empty and says so; the next refresh tries again.
func (s *Server) pageView(ctx context.Context, now time.Time) pageView {
	v := pageView{Loaded: true, ConnClass: "muted", CSRF: s.csrf, Actions: s.opts.Act != nil,
		Conn: fmt.Sprintf("as of %s UTC; refreshes every %d s", now.UTC().Format("15:04:05"), int(pageRefresh/time.Second))}
	failed := func(what string, err error) {
		if v.Loaded { // the first problem is the one to read
			v.Conn = "cannot read " + what + ": " + state.ScrubText(err.Error())
		}
		v.Loaded, v.ConnClass = false, "bad"
	}
	st, err := s.opts.Status.Status(ctx)
	if err != nil {
		failed("the status", err)
	} else {
		st.Ready = s.readiness()
		if s.opts.Events != nil && st.Events == nil {
			st.Events = s.opts.Events.List()
		}
		v.setStatus(cleanStatus(st), now)
	}
	for _, l := range []struct {
		list pageList
		rows *pageRows
	}{{pageActive, &v.Active}, {pageQueued, &v.Queued}, {pagePublished, &v.Published}, {pageFailures, &v.Failures}} {
		jobs, err := s.opts.Status.Jobs(ctx, JobQuery{Stages: l.list.stages, Limit: l.list.limit})
		if err != nil {
			failed("the jobs", err)
			continue
		}
		*l.rows = pageJobRows(l.list, jobs, now, v.Actions)
	}
	active := map[uint64]bool{}
	for _, j := range v.Active.Jobs {
		active[j.ID] = true
		if j.Job.Progress != nil {
			v.Uploading++
		}
	}
	// A queued job whose check runs is listed at work already.
	v.Queued.Jobs = slices.DeleteFunc(v.Queued.Jobs, func(j pageJob) bool { return active[j.ID] })
	return v
}

// setStatus fills the overview, the folders, the history and the pacing of
// v from st.
func (v *pageView) setStatus(st Status, now time.Time) {
	v.Status, v.Ready = st, st.Ready.Ready
	switch st.Token.State {
	case TokenOK:
		v.TokenClass = "ok"
	case TokenRefused:
		v.TokenClass = "bad"
	default:
		v.TokenClass = "warn"
	}
	v.Bandwidth = bandwidthText(st.Bandwidth)
	for _, s := range state.Stages {
		if n := st.Queue[s]; n > 0 {
			v.Stages = append(v.Stages, pageStage{s, n})
		}
	}
	v.Failing = st.Queue[state.Failed] + st.Queue[state.Held]
	v.Backlog = fmt.Sprintf("%d %s, %s", st.Backlog.Files, plural(st.Backlog.Files, "file", "files"), humanBytes(float64(st.Backlog.Bytes)))
	v.TodaySent = humanBytes(float64(st.Today.Sent))
	v.TodayPublished = fmt.Sprintf("%d %s published (%s)", st.Today.Published, plural(st.Today.Published, "file", "files"), humanBytes(float64(st.Today.PublishedBytes)))
	v.Spark = sparkline(st.Throughput)
	if n := len(st.Settling) - maxSettlingShown; n > 0 {
		st.Settling, v.SettlingMore = st.Settling[:maxSettlingShown], n
	}
	for _, f := range st.Settling {
		v.Settling = append(v.Settling, pageSettling{Settling: f, Changed: timeCell(f.Changed, now),
			Text: "being written, " + humanBytes(float64(f.Size)) + " so far"})
	}
	v.setFolders(st, now)
	for _, p := range st.Pacing {
		v.Pacing = append(v.Pacing, pagePacing{p, timeCell(p.Reset, now)})
	}
}

// setFolders fills v's watch folders and events, and the folders and
// stages the events' filter offers.
func (v *pageView) setFolders(st Status, now time.Time) {
	folders := map[string]bool{}
	for _, f := range st.Watched {
		pf := pageFolder{Folder: f, State: "watching", Class: "ok", Scanned: timeCell(f.LastScan, now)}
		switch {
		case f.Error != "":
			pf.State, pf.Class = f.Error, "bad"
		case f.LastScan.IsZero():
			pf.State, pf.Class = "scanning", "warn"
		case f.Polling:
			pf.State = "polling"
		}
		v.Folders = append(v.Folders, pf)
		folders[f.Path] = true
		v.EventFolders = append(v.EventFolders, f.Path)
	}
	stages := map[state.Stage]bool{}
	for _, e := range st.Events {
		v.Events = append(v.Events, pageEvent{Event: e, At: timeCell(e.Time, now)})
		if e.Folder != "" && !folders[e.Folder] {
			folders[e.Folder] = true
			v.EventFolders = append(v.EventFolders, e.Folder)
		}
		stages[e.Stage] = true
	}
	for _, s := range state.Stages {
		if stages[s] {
			v.EventStages = append(v.EventStages, s)
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sparkline draws bytes per minute into a 240×40 box; an hour with no
// upload is a flat line at the bottom.
func sparkline(minutes []int64) pageSpark {
	const w, h = 240.0, 40.0
	var peak int64
	for _, b := range minutes {
		peak = max(peak, b)
	}
	var pts []string
	for i, b := range minutes {
		x := 0.0
		if len(minutes) > 1 {
			x = w * float64(i) / float64(len(minutes)-1)
		}
		y := h - 1
		if peak > 0 {
			y = h - 1 - (h-2)*float64(b)/float64(peak)
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	sp := pageSpark{Points: strings.Join(pts, " "), Peak: humanBytes(float64(peak)/60) + "/s"}
	if n := len(minutes); n > 0 {
		sp.Now = humanBytes(float64(minutes[n-1])/60) + "/s"
	}
	return sp
}

// bandwidthText is the Bandwidth line.
func bandwidthText(bw Bandwidth) string {
	limit := "none"
	if bw.Limit > 0 {
		limit = humanBytes(float64(bw.Limit)) + "/s"
	}
	s := humanBytes(bw.Rate) + "/s now, limit " + limit
	if bw.InFlight > 0 {
		s += ", " + humanBytes(float64(bw.InFlight)) + " to send"
	}
	return s
}

func pageJobRows(l pageList, list JobList, now time.Time, actions bool) pageRows {
	if len(list.Jobs) > l.limit {
		list.Jobs = list.Jobs[:l.limit]
	}
	r := pageRows{Shown: len(list.Jobs), Total: list.Total}
	if r.Total > r.Shown {
		r.MoreHref = template.URL("api/jobs?" + l.query + "&limit=1000")
		r.MoreText = "/api/jobs?" + l.query
	}
	for _, j := range list.Jobs {
		j = cleanJob(j)
		pj := pageJob{Job: j, Updated: timeCell(j.UpdatedAt, now), Reason: j.FailReason, Viewer: httpLink(j.ViewerURL)}
		if j.Size > 0 {
			pj.SizeText = humanBytes(float64(j.Size))
		}
		if pj.Reason == "" {
			pj.Reason = j.LastError
		}
		if actions {
			pj.Actions = actionsFor(string(j.Stage))
		}
		p, label := j.Progress, "upload"
		if p == nil && j.Check != nil {
			p, label = j.Check, j.Check.Step
		}
		if p != nil && p.Size > 0 {
			pj.Progress = &pageProgress{Sent: min(p.Sent, p.Size), Size: p.Size, Label: fmt.Sprintf("%s of job %d", label, j.ID)}
		}
		r.Jobs = append(r.Jobs, pj)
	}
	return r
}

// rateETA is ", 24.0 MiB/s, ETA 3 min" while
// bytes move, "" otherwise.
func rateETA(p Progress) string {
	if !(p.Rate > 0) {
		return ""
	}
	s := ", " + humanBytes(p.Rate) + "/s"
	switch eta := math.Round(p.ETA); {
	case eta <= 0:
	case eta < 90:
		s += fmt.Sprintf(", ETA %.0f s", eta)
	case eta < 5400:
		s += fmt.Sprintf(", ETA %.0f min", math.Round(eta/60))
	default:
		s += fmt.Sprintf(", ETA %.0f h", math.Round(eta/3600))
	}
	return s
}

// httpLink returns u if it is an absolute http(s) URL, else "".
func httpLink(u string) string {
	x, err := url.Parse(u)
	if err != nil || (x.Scheme != "https" && x.Scheme != "http") || x.Host == "" {
		return ""
	}
	return x.String()
}

// humanBytes is a size in binary units, one decimal above B
// (state.HumanSize, the program's one way to print a size).
func humanBytes(n float64) string {
	if math.IsNaN(n) || n < 0 {
		n = 0
	}
	return state.HumanSize(int64(n))
}

// timeCell is how long ago t was, in whole units.
func timeCell(t time.Time, now time.Time) pageTime {
	if t.IsZero() {
		return pageTime{}
	}
	c := pageTime{Title: t.Format(time.RFC3339Nano)}
	s := int64(math.Round(now.Sub(t).Seconds()))
	switch {
	case s < 0:
		c.Text = fmt.Sprintf("in %d s", -s)
	case s < 90:
		c.Text = fmt.Sprintf("%d s ago", s)
	case s < 5400:
		c.Text = fmt.Sprintf("%d min ago", int64(math.Round(float64(s)/60)))
	case s < 129600:
		c.Text = fmt.Sprintf("%d h ago", int64(math.Round(float64(s)/3600)))
	default:
		c.Text = t.Local().Format(time.DateTime)
	}
	return c
}

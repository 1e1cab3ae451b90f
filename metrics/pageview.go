package metrics

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"slices"
	"time"

	"github.com/splatd/splatd/state"
)

// The status page is rendered on the server with its first state, so that
// it shows data at once (and without script at all); its script then
// refreshes the same elements from /api/status and /api/jobs. The view
// below and the script's render functions build the same markup: a change
// to one is a change to the other (the browser test loads both).

// pageRefresh is how often the page's script refreshes it (REFRESH_MS).
const pageRefresh = 5 * time.Second

// pageList is one of the page's job lists: the query the script repeats
// (the same stages and limit) and the rows.
type pageList struct {
	stages []state.Stage
	limit  int
	query  string // the stage query, as the script writes it
}

var (
	pageActive    = pageList{[]state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing}, 50, "stage=ready,signed,uploaded,publishing,processing"}
	pagePublished = pageList{[]state.Stage{state.Done}, 20, "stage=done"}
	pageFailures  = pageList{[]state.Stage{state.Failed, state.Held}, 50, "stage=failed,held"}
	// pageStages is the order of the queue table (the script's STAGES);
	// other stages follow, sorted.
	pageStages = []state.Stage{state.Queued, state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done, state.Failed, state.Held}
)

// pageView is what the page template renders.
type pageView struct {
	Loaded     bool   // every part was read: body data-loaded
	Conn       string // the line under the title
	ConnClass  string
	Status     Status
	Ready      bool
	TokenClass string
	Bandwidth  string
	Queue      []pageStage
	Pacing     []pagePacing
	Active     pageRows
	Published  pageRows
	Failures   pageRows
}

type pageStage struct {
	Stage state.Stage
	Jobs  int
}

type pagePacing struct {
	Pacing
	Reset pageTime
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
	Reason   string // fail_reason, else last_error
	Viewer   string // an http(s) link, or ""
	Progress *pageProgress
}

type pageProgress struct {
	Sent, Size int64
	Label      string // the bar's aria-label
	Text       string
}

// pageTime is a time cell: the exact time as its title, "12 s ago" shown.
type pageTime struct {
	Title string
	Text  string
}

// pageView reads the source as the script does and builds the first state.
// A part that cannot be read leaves its table empty and says so; the
// script tries again at its first refresh.
func (s *Server) pageView(ctx context.Context, now time.Time) pageView {
	v := pageView{Loaded: true, ConnClass: "muted",
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
		v.setStatus(cleanStatus(st), now)
	}
	for _, l := range []struct {
		list pageList
		rows *pageRows
	}{{pageActive, &v.Active}, {pagePublished, &v.Published}, {pageFailures, &v.Failures}} {
		jobs, err := s.opts.Status.Jobs(ctx, JobQuery{Stages: l.list.stages, Limit: l.list.limit})
		if err != nil {
			failed("the jobs", err)
			continue
		}
		*l.rows = pageJobRows(l.list, jobs, now)
	}
	return v
}

// setStatus fills the overview, the queue and the pacing of v from st.
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
	seen := map[state.Stage]bool{}
	for _, s := range pageStages {
		v.Queue = append(v.Queue, pageStage{s, st.Queue[s]})
		seen[s] = true
	}
	var rest []state.Stage
	for s := range st.Queue {
		if !seen[s] {
			rest = append(rest, s)
		}
	}
	slices.Sort(rest)
	for _, s := range rest {
		v.Queue = append(v.Queue, pageStage{s, st.Queue[s]})
	}
	for _, p := range st.Pacing {
		v.Pacing = append(v.Pacing, pagePacing{p, timeCell(p.Reset, now)})
	}
}

// bandwidthText is the Bandwidth line, as the script writes it.
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

func pageJobRows(l pageList, list JobList, now time.Time) pageRows {
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
		if pj.Reason == "" {
			pj.Reason = j.LastError
		}
		p := j.Progress
		if p == nil {
			p = j.Check
		}
		if p != nil && p.Size > 0 {
			pct := min(100, int64(math.Floor(100*float64(p.Sent)/float64(p.Size))))
			step, label := " ", "upload"
			if p.Step != "" {
				step, label = " "+p.Step+" ", p.Step
			}
			pj.Progress = &pageProgress{Sent: min(p.Sent, p.Size), Size: p.Size, Label: fmt.Sprintf("%s of job %d", label, j.ID),
				Text: fmt.Sprintf("%s%s of %s (%d %%)", step, humanBytes(float64(p.Sent)), humanBytes(float64(p.Size)), pct) + rateETA(*p)}
		}
		r.Jobs = append(r.Jobs, pj)
	}
	return r
}

// rateETA is the script's rateEta(): ", 24.0 MiB/s, ETA 3 min" while
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

// humanBytes is the script's bytes(): binary units, one decimal above B
// (state.HumanSize, the program's one way to print a size).
func humanBytes(n float64) string {
	if math.IsNaN(n) || n < 0 {
		n = 0
	}
	return state.HumanSize(int64(n))
}

// timeCell is the script's when(): how long ago t was, in whole units.
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

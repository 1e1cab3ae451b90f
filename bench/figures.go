package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
)

// Figure is one measured value, printed as "name value unit".
type Figure struct {
	Name   string
	Value  float64
	Unit   string
	Target string // e.g. "<= 64", empty when the figure has none
	Met    *bool  // nil when there is no target
	Note   string
}

// String prints "name value unit", then the target and the note.
func (f Figure) String() string {
	s := fmt.Sprintf("%s %s %s", f.Name, strconv.FormatFloat(f.Value, 'f', -1, 64), f.Unit)
	if f.Met != nil {
		v := "met"
		if !*f.Met {
			v = "MISSED"
		}
		s += fmt.Sprintf("  target %s: %s", f.Target, v)
	}
	if f.Note != "" {
		s += "  # " + f.Note
	}
	return s
}

func met(ok bool) *bool { return &ok }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchOptions configures the figures.
type BenchOptions struct {
	Bin  string    // the splatd binary
	Dir  string    // scratch folder
	Reps int       // repetitions of the upload and restart figures
	Log  io.Writer // progress
}

func (o BenchOptions) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

// waitReceipt waits until the receipt of path says done.
func waitReceipt(ctx context.Context, d *Daemon, path string, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) && ctx.Err() == nil {
		if b, err := os.ReadFile(after.ReceiptPath(path)); err == nil {
			var r after.Receipt
			if json.Unmarshal(b, &r) == nil {
				if r.Status != "done" {
					return fmt.Errorf("%s finished %s: %s", filepath.Base(path), r.Status, r.Message)
				}
				return nil
			}
		}
		select {
		case <-d.Done():
			return fmt.Errorf("splatd exited: %v", d.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not published within %s", filepath.Base(path), timeout)
}

// UploadFigures publishes a 256 MiB and a 2 GiB sparse PLY with `splatd
// run` (a fresh daemon per file) and reads the child's VmHWM once the job is
// done; each daemon PUT is paired with `curl -T` of the same file to a URL
// from sim.Sign on the same storage listener. Throughput compares the PUT
// phase only (the daemon hashes the file first): the daemon's figure is
// its own splatd_upload_duration_seconds (the storage request, first byte
// to response), curl's is its time_total.
func UploadFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	sim, err := apisim.New(apisim.Options{DiscardObjects: true, ProcessingDelay: 100 * time.Millisecond, Dir: filepath.Join(o.Dir, "upload-sim"),
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000}})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	curl, curlErr := exec.LookPath("curl")
	if curlErr != nil {
		curl = "" // uploadRep then skips the curl pairing
	}
	sizes := []uploadSize{{"256MiB", 256 << 20}, {"2GiB", 2 << 30}}
	results := map[string][]uploadRun{}
	for _, sz := range sizes {
		for rep := range o.Reps {
			r, err := uploadRep(ctx, o, sim, curl, sz, rep)
			if err != nil {
				return nil, err
			}
			o.logf("upload %s rep %d: daemon VmHWM %.1f MiB, PUT %.0f MB/s; curl -T %.0f MB/s", sz.name, rep+1, r.rss, r.daemonBps/1e6, r.curlBps/1e6)
			results[sz.name] = append(results[sz.name], r)
		}
	}
	return uploadFigs(sizes, results, curlErr), nil
}

// uploadSize is one file UploadFigures publishes: its name in the figures
// and its apparent size.
type uploadSize struct {
	name string
	size int64
}

// uploadRun is one repetition's measurements: the daemon's peak RSS (MiB),
// its storage PUT's bytes per second and curl's (0 when curl is missing).
type uploadRun struct{ rss, daemonBps, curlBps float64 }

// uploadRep is one repetition of UploadFigures for sz: a fresh daemon, in
// its own directory, publishes a fresh sparse PLY (its seed holds the rep
// and the time, so every rep's file differs), then, when curl is not "",
// curl -T sends the same file, so that the two PUTs are paired. Once the
// daemon has started, the file is removed however the rep ends.
func uploadRep(ctx context.Context, o BenchOptions, sim *apisim.Server, curl string, sz uploadSize, rep int) (uploadRun, error) {
	var r uploadRun
	dir := filepath.Join(o.Dir, fmt.Sprintf("upload-%s-%d", sz.name, rep))
	cfg := DaemonConfig{Sim: sim, Dir: dir, Workers: 1}
	cfgPath, err := cfg.Write()
	if err != nil {
		return r, err
	}
	file := filepath.Join(cfg.Inbox, "big-"+sz.name+".ply")
	size, err := WriteSparsePLY(file, fmt.Sprintf("%s %d %d", sz.name, rep, time.Now().UnixNano()), sz.size)
	if err != nil {
		return r, err
	}
	d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(dir, "splatd.log"))
	if err != nil {
		return r, err
	}
	defer os.Remove(file)
	werr := waitReceipt(ctx, d, file, 10*time.Minute)
	if werr == nil {
		r, werr = daemonPut(d, size)
	}
	if err := d.Stop(30 * time.Second); err != nil && werr == nil {
		werr = err
	}
	if werr != nil {
		return r, fmt.Errorf("upload %s: %w", sz.name, werr)
	}
	if curl != "" {
		if r.curlBps, err = curlPut(ctx, curl, sim, file, size); err != nil {
			return r, err
		}
	}
	return r, nil
}

// daemonPut reads, from a daemon that has published one file of size
// bytes, its peak RSS and its storage PUT's throughput (its own
// splatd_upload_duration_seconds); more than one PUT (a retry) would time
// two requests as one, so it is an error.
func daemonPut(d *Daemon, size int64) (uploadRun, error) {
	var r uploadRun
	hwm, herr := d.VmHWM()
	m, merr := d.Metrics()
	if herr != nil || merr != nil {
		return r, errors.Join(herr, merr)
	}
	if m["splatd_upload_duration_seconds_count"] != 1 {
		return r, fmt.Errorf("%v storage PUTs, want 1", m["splatd_upload_duration_seconds_count"])
	}
	r.rss = float64(hwm) / (1 << 20)
	r.daemonBps = float64(size) / m["splatd_upload_duration_seconds_sum"]
	return r, nil
}

// uploadFigs turns the repetitions into figures, medians per size: peak
// RSS against its target, the daemon's and curl's throughput and their
// ratio (NaN, with curlErr as the note, when curl was missing), and how
// much the peak grows from the small file to the large one.
func uploadFigs(sizes []uploadSize, results map[string][]uploadRun, curlErr error) []Figure {
	var figs []Figure
	rssOf := map[string]float64{}
	for _, sz := range sizes {
		var rss, dbps, cbps, ratio []float64
		for _, r := range results[sz.name] {
			rss = append(rss, r.rss)
			dbps = append(dbps, r.daemonBps/(1<<20))
			if r.curlBps > 0 {
				cbps = append(cbps, r.curlBps/(1<<20))
				ratio = append(ratio, r.daemonBps/r.curlBps)
			}
		}
		rssOf[sz.name] = median(rss)
		note := fmt.Sprintf("median of %d; max %.1f", len(rss), slices.Max(rss))
		figs = append(figs, Figure{Name: "upload_peak_rss_" + sz.name, Value: round(median(rss), 1), Unit: "MiB",
			Target: "<= 64", Met: met(median(rss) <= 64), Note: note})
		figs = append(figs, Figure{Name: "upload_put_throughput_" + sz.name, Value: round(median(dbps), 0), Unit: "MiB/s",
			Note: fmt.Sprintf("splatd's storage PUT, median of %d", len(dbps))})
		if len(cbps) > 0 {
			figs = append(figs, Figure{Name: "upload_curl_throughput_" + sz.name, Value: round(median(cbps), 0), Unit: "MiB/s",
				Note: "curl -T of the same file to the same storage listener"})
			figs = append(figs, Figure{Name: "upload_throughput_ratio_to_curl_" + sz.name, Value: round(median(ratio), 3), Unit: "ratio",
				Target: ">= 0.9", Met: met(median(ratio) >= 0.9), Note: fmt.Sprintf("median of %d paired runs", len(ratio))})
		} else {
			figs = append(figs, Figure{Name: "upload_throughput_ratio_to_curl_" + sz.name, Value: math.NaN(), Unit: "ratio",
				Note: "skipped: " + curlErr.Error()})
		}
	}
	diff := rssOf["2GiB"] - rssOf["256MiB"]
	figs = append(figs, Figure{Name: "upload_peak_rss_2GiB_minus_256MiB", Value: round(diff, 1), Unit: "MiB",
		Target: "<= 8", Met: met(diff <= 8), Note: "the peak does not grow with the file"})
	return figs
}

// curlPut uploads file with curl -T to a freshly signed URL and returns
// bytes per second, checking that storage stored the object.
func curlPut(ctx context.Context, curl string, sim *apisim.Server, file string, size int64) (float64, error) {
	before := sim.Stats().Uploads
	url, key := sim.Sign(filepath.Base(file))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	// Expect: off and the same Content-Type as splatd, so that both clients
	// make the same request.
	cmd := exec.CommandContext(ctx, curl, "-sS", "-T", file, "--cacert", sim.CAFile(), "-H", "Expect:",
		"-H", "Content-Type: binary/octet-stream", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", url)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("curl -T: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "200" {
		return 0, fmt.Errorf("curl -T answered %q", out)
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil || secs <= 0 {
		return 0, fmt.Errorf("curl time %q", f[1])
	}
	if _, n, ok := sim.Object(key); !ok || n != size || sim.Stats().Uploads != before+1 {
		return 0, errors.New("curl's upload was not stored")
	}
	return float64(size) / secs, nil
}

// requestLog records when the simulator answered each request of the
// routes it is told to watch (from its debug log).
type requestLog struct {
	mu     sync.Mutex
	routes map[string]bool
	times  []time.Time // every request of routes, answered or refused
	status []int       // each one's status
}

func (l *requestLog) Write(p []byte) (int, error) {
	var ev struct {
		Route   string `json:"route"`
		Message string `json:"message"`
		Status  int    `json:"status"`
	}
	if json.Unmarshal(p, &ev) == nil && ev.Message == "api request" && l.routes[ev.Route] {
		l.mu.Lock()
		l.times = append(l.times, time.Now())
		l.status = append(l.status, ev.Status)
		l.mu.Unlock()
	}
	return len(p), nil
}

// windows groups the logged requests into fixed windows the way the
// simulator's limiter opens them (a window starts at the whole second of the
// first request after the previous one ended): "answered@start" or
// "answered+N×429@start" each, start in whole seconds from the first
// window's. Gaps between windows and under-filled windows show where a run
// lost time.
func (l *requestLog) windows(window time.Duration) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ok, refused []int
	var starts []time.Time
	var end time.Time
	for i, t := range l.times {
		if ok == nil || !t.Before(end) {
			start := t.Truncate(time.Second)
			end = start.Add(window)
			ok, refused, starts = append(ok, 0), append(refused, 0), append(starts, start)
		}
		if l.status[i] == http.StatusTooManyRequests {
			refused[len(refused)-1]++
		} else {
			ok[len(ok)-1]++
		}
	}
	out := make([]string, len(ok))
	for i := range ok {
		out[i] = strconv.Itoa(ok[i])
		if refused[i] > 0 {
			out[i] += "+" + strconv.Itoa(refused[i]) + "×429"
		}
		out[i] += "@" + strconv.Itoa(int(starts[i].Sub(starts[0]).Seconds()))
	}
	return out
}

// PacingFigures publishes a batch of 20 and one of 30 files, each to its
// own simulator (its own token) and daemon, at the same time, under a
// strict limit of 5 requests per 10 s window on the sign and publish
// routes (pacingRun).
func PacingFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	batches := []int{20, 30}
	figs := make([][]Figure, len(batches))
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, n := range batches {
		wg.Go(func() { figs[i], errs[i] = pacingRun(ctx, o, n) })
	}
	wg.Wait()
	var out []Figure
	for _, f := range figs {
		out = append(out, f...)
	}
	return out, errors.Join(errs...)
}

// pacingRun publishes files under a strict limit of 5 requests per 10 s
// window on the sign and publish routes. The daemon needs 2 × files + 1
// strict requests: one sign and one publish per file, and the token probe
// at start (under legacy a signed-URL request). The minimum time the limit
// allows for them is (ceil(need / 5) - 1) windows from the first one: the
// last window's requests can go at its start. The measured time runs from
// the first strict request to the last file's done receipt.
func pacingRun(ctx context.Context, o BenchOptions, files int) ([]Figure, error) {
	const limit, window = 5, 10 * time.Second
	rl := &requestLog{routes: map[string]bool{apisim.RouteSignedURL: true, apisim.RoutePublish: true}}
	sim, err := apisim.New(apisim.Options{Window: window, Dir: filepath.Join(o.Dir, fmt.Sprintf("pacing-%d-sim", files)), ProcessingDelay: 100 * time.Millisecond,
		Limits:  map[apisim.Class]int{apisim.ClassStrict: limit},
		Classes: map[string]apisim.Class{apisim.RouteSignedURL: apisim.ClassStrict, apisim.RoutePublish: apisim.ClassStrict},
		Logger:  zerolog.New(rl).Level(zerolog.DebugLevel)})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, fmt.Sprintf("pacing-%d", files))}
	cfgPath, err := cfg.Write()
	if err != nil {
		return nil, err
	}
	var paths []string
	for i := range files {
		p := filepath.Join(cfg.Inbox, fmt.Sprintf("paced-%02d.ply", i))
		if err := WriteSample(p, fmt.Sprintf("paced %d %d %d", files, i, time.Now().UnixNano()), 100+i); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd.log"))
	if err != nil {
		return nil, err
	}
	defer d.Stop(30 * time.Second)
	for _, p := range paths {
		if err := waitReceipt(ctx, d, p, 6*time.Minute); err != nil {
			return nil, fmt.Errorf("pacing %d files: %w", files, err)
		}
	}
	last := time.Now()
	rl.mu.Lock()
	first, strict := rl.times[0], len(rl.times)
	rl.mu.Unlock()
	perWindow := rl.windows(window)
	st := sim.Stats()
	need := 2*files + 1 // the token probe at start is a signed-URL request
	minimum := time.Duration((need+limit-1)/limit-1) * window
	took := last.Sub(first)
	ratio := took.Seconds() / minimum.Seconds()
	o.logf("pacing %d files: %d strict requests, first at +%s, all done after %s; per window (answered@start s): %v", files, strict, first.Sub(d.Started).Round(time.Millisecond), took.Round(time.Millisecond), perWindow)
	sfx := fmt.Sprintf("_%d_files", files)
	return []Figure{
		{Name: "pacing_time" + sfx, Value: round(took.Seconds(), 1), Unit: "s",
			Note: fmt.Sprintf("first strict request to last file done; %d strict requests made", strict)},
		{Name: "pacing_ratio_to_minimum" + sfx, Value: round(ratio, 3), Unit: "ratio", Target: "<= 1.1", Met: met(ratio <= 1.1),
			Note: fmt.Sprintf("minimum %s = (ceil(%d/%d)-1) x %s; %d = a sign and a publish per file and the start's token probe", minimum, need, limit, window, need)},
		{Name: "pacing_own_429s" + sfx, Value: float64(st.RateLimited), Unit: "count", Target: "0", Met: met(st.RateLimited == 0),
			Note: "no other traffic shares the token, so every 429 is our own"},
	}, nil
}

// RestartFigures builds a state of 10,000 finished jobs for 10,000 files in
// the watched folder, through the real queue code (EnqueueBatch, then Commit
// through every legal stage to done, and the after-action marked done), then
// starts `splatd run` on it Reps times and measures the time from exec to
// /readyz 200, and counts the API requests made (the simulator's counters)
// from start until 1 s after ready.
func RestartFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	const n = 10000
	sim, err := apisim.New(apisim.Options{Dir: filepath.Join(o.Dir, "restart-sim")})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, "restart")}
	cfgPath, err := cfg.Write()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := buildFinishedState(ctx, cfg.Inbox, cfg.StateDir, n); err != nil {
		return nil, err
	}
	o.logf("restart: built %d files and their finished jobs in %s", n, time.Since(t0).Round(100*time.Millisecond))
	sim.ResetStats()
	var ready []float64
	for rep := range o.Reps {
		d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd.log"))
		if err != nil {
			return nil, err
		}
		took, err := d.WaitReady(2 * time.Minute)
		if err == nil {
			time.Sleep(time.Second)
		}
		if serr := d.Stop(30 * time.Second); err == nil {
			err = serr
		}
		if err != nil {
			return nil, fmt.Errorf("restart: %w", err)
		}
		o.logf("restart %d: ready after %s", rep+1, took.Round(time.Millisecond))
		ready = append(ready, took.Seconds()*1000)
	}
	st := sim.Stats()
	calls, byRoute := 0, []string{}
	for _, r := range slices.Sorted(maps.Keys(st.Requests)) {
		if n := st.Total(r); n > 0 {
			calls += n
			byRoute = append(byRoute, fmt.Sprintf("%s %d", r, n))
		}
	}
	return []Figure{
		{Name: "restart_ready_10k_finished", Value: round(median(ready), 0), Unit: "ms",
			Note: fmt.Sprintf("exec to /readyz 200, median of %d; 10,000 files, 10,000 finished jobs (retention keeps 5,000 in full, 5,000 as tombstones)", len(ready))},
		{Name: "restart_api_calls", Value: float64(calls), Unit: "count", Target: fmt.Sprintf("<= %d (the token probe at each start)", len(ready)),
			Met:  met(calls <= len(ready)),
			Note: fmt.Sprintf("every route the simulator serves, over %d restarts, until 1 s after ready: %v", len(ready), byRoute)},
	}, nil
}

// buildFinishedState writes n small files and, with the queue package,
// enqueues each and commits it through ready, signed, uploaded, publishing,
// processing to done, then marks its after-action finished — what the
// daemon itself leaves after publishing them. NoSync: the build is not
// what is measured.
func buildFinishedState(ctx context.Context, inbox, stateDir string, n int) error {
	var cands []queue.Candidate
	shas := map[string]string{}
	for i := range n {
		p := filepath.Join(inbox, fmt.Sprintf("scan-%05d.ply", i))
		if err := WriteSample(p, fmt.Sprintf("restart %d", i), 1); err != nil {
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		sum, err := FileSHA256(p)
		if err != nil {
			return err
		}
		shas[p] = sum
		cands = append(cands, queue.Candidate{Path: p, Root: inbox, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	s, err := queue.Open(stateDir, queue.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.EnqueueBatch(ctx, cands); err != nil {
		return err
	}
	for i := range n {
		now := time.Now()
		j, ok, err := s.Claim(now)
		if err != nil || !ok {
			return fmt.Errorf("claim %d: %v %v", i, ok, err)
		}
		for _, to := range []state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
			from := j.Stage
			if err := j.Move(to, now); err != nil {
				return err
			}
			switch to {
			case state.Ready:
				j.SHA256, j.Kind = shas[j.Path], "ply"
				j.Params = state.PublishParams{Title: strings.TrimSuffix(filepath.Base(j.Path), ".ply"), Format: "sog"}
			case state.Signed:
				j.Upload = state.Upload{URL: "https://127.0.0.1:1/objects/uploads/" + j.SHA256[:16], Key: "uploads/" + j.SHA256[:16], KeyField: "storageKey", IssuedAt: now}
			case state.Processing:
				id := fmt.Sprint(j.ID)
				j.SplatID, j.SplatHash, j.ViewerURL, j.PublishedAt = id, "h"+id, "https://127.0.0.1:1/view?id=h"+id, &now
			case state.Done:
				j.TaskStatus, j.CompletedAt = "completed", &now
			}
			if j, err = s.Commit(j, from); err != nil {
				return err
			}
		}
		s.Release(j.ID)
		if err := s.MarkFinalized(j.ID); err != nil {
			return err
		}
	}
	st, err := s.Stats()
	if err != nil {
		return err
	}
	if st.Stages[state.Done]+st.Tombstones < n {
		return fmt.Errorf("state holds %d done jobs and %d tombstones, want %d", st.Stages[state.Done], st.Tombstones, n)
	}
	return nil
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// GoBenchFigures runs the packages' own benchmarks (go test -bench, count
// times) and reprints each reported metric as the median over the runs.
func GoBenchFigures(ctx context.Context, o BenchOptions, count int, pkgs ...string) ([]Figure, error) {
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-count", strconv.Itoa(count)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	values := map[string][]float64{}
	units := map[string]string{}
	var order []string
	pkg := ""
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = filepath.Base(p)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || f[i+1] == "ns/op" || f[i+1] == "B/op" || f[i+1] == "allocs/op" {
				continue
			}
			name := pkg + "_" + strings.NewReplacer("/", "_", "-", "_").Replace(m[1]) + "_" + strings.NewReplacer("/", "_per_", "-", "_").Replace(f[i+1])
			if _, ok := values[name]; !ok {
				order = append(order, name)
			}
			values[name] = append(values[name], v)
			units[name] = f[i+1]
		}
	}
	var figs []Figure
	for _, name := range order {
		figs = append(figs, Figure{Name: name, Value: round(median(values[name]), 4), Unit: units[name],
			Note: fmt.Sprintf("median of %d (go test -bench)", len(values[name]))})
	}
	return figs, nil
}

// Package metrics holds splatd's Prometheus collectors and the small HTTP
// server that exposes them with the /healthz and /readyz probes.
//
// Nothing here touches Prometheus's default registry: main builds a private
// registry (NewRegistry) so that tests can create as many daemons as they like
// in one process and so that only splatd's own series are exported.
package metrics

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/splatd/splatd/state"
)

// namespace prefixes every metric so that splatd's series never collide with
// another exporter's on a shared Prometheus.
const namespace = "splatd"

// Known label values. Each is pre-initialised at zero so that a series exists
// from the first scrape: rate() and increase() over a counter that appears
// only at its first increment miss that increment, and an alert over a
// missing series never fires.
var (
	// Results lists the terminal outcomes passed to JobFinished.
	Results = []string{"done", "failed", "duplicate", "held", "canceled"}
	// WatchErrorKinds lists the kinds the watcher reports through WatchError
	// (see watcher.Observer). Other kinds are still counted; these are the
	// ones that exist at zero.
	WatchErrorKinds = []string{"overflow", "watch_limit", "instance_limit", "notify", "add", "root"}
	// NotifyErrorKinds lists the notification channels that report
	// failures through NotifyError: the webhook and after.exec.
	NotifyErrorKinds = []string{"webhook", "exec"}
	// AfterActions lists the after-actions counted by AfterActionError
	// (after.ActionReceipt, ActionMove, ActionDelete).
	AfterActions = []string{"receipt", "move", "delete"}
)

// CodeNoResponse is the code label of an API request that got no HTTP
// response at all (network error, timeout, cancelled).
const CodeNoResponse = "error"

// Metrics is splatd's set of collectors. Its methods are the hooks the
// uploader (uploader.Observer, api.Observer), the watcher and the daemon call.
//
// All methods are safe for concurrent use, never block, and are no-ops on a
// nil *Metrics, so a command without a registry can pass nil.
type Metrics struct {
	// filesDiscovered counts candidate files the watcher handed to the
	// queue, each version once (not again when the store refused it).
	filesDiscovered prometheus.Counter
	// jobs is the number of jobs per stage, set from the queue's stats.
	jobs *prometheus.GaugeVec
	// jobsFinished counts jobs reaching a terminal stage, by result.
	jobsFinished *prometheus.CounterVec
	// uploadBytes counts bytes written to object storage.
	uploadBytes prometheus.Counter
	// sent is uploadBytes by minute, for the status page.
	sent Throughput
	// uploadDuration observes each completed storage PUT.
	uploadDuration prometheus.Histogram
	// apiRequests counts finished HTTP exchanges by route and status code.
	apiRequests *prometheus.CounterVec
	// apiRequestDuration observes HTTP exchanges by route.
	apiRequestDuration *prometheus.HistogramVec
	// rateLimitRemaining is the latest X-RateLimit-Remaining per limit class.
	rateLimitRemaining *prometheus.GaugeVec
	// rateLimitWait counts seconds requests spent delayed by the pacer.
	rateLimitWait prometheus.Counter
	// jobDuration observes the time from enqueue to a terminal stage.
	jobDuration prometheus.Histogram
	// oldestJobAge is the age of the oldest unfinished job.
	oldestJobAge prometheus.Gauge
	// buildInfo is 1, labelled with the version and the Go version.
	buildInfo *prometheus.GaugeVec
	// watchErrors counts watcher errors by kind.
	watchErrors *prometheus.CounterVec
	// watchPolling is 1 while a watch root runs on the polling fallback.
	watchPolling prometheus.Gauge
	// tokenRefused is 1 while the API refuses the token (workers paused).
	tokenRefused prometheus.Gauge
	// notifyErrors counts notifications that failed or were dropped, by kind.
	notifyErrors *prometheus.CounterVec
	// afterActionErrors counts failed after-actions by action.
	afterActionErrors *prometheus.CounterVec
	// configError is 1 per kind while a configuration error pauses work.
	configError *prometheus.GaugeVec
	// uploads reads the bandwidth limit in force and the bytes of the
	// uploads in progress at each scrape (SetUploadSource); nil reads 0.
	uploads atomic.Pointer[UploadSource]
	// ready is /readyz's check, read at each scrape (SetReadySource); nil
	// reads not ready.
	ready atomic.Pointer[func() error]
}

// UploadSource is what the upload gauges read at each scrape: the upload
// bandwidth limit in force (bytes per second, 0 for none) and the bytes of
// the uploads in progress still to be sent. Both must be cheap and never
// block on the network.
type UploadSource struct {
	Limit    func() int64
	InFlight func() int64
}

// Bucket layouts. API calls are sub-second but a storage PUT of a large splat
// can take hours on a slow uplink, and a job waits for server processing too,
// so the upload and job histograms reach past the 2h default poll timeout.
var (
	apiBuckets    = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200}
	uploadBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400}
	jobBuckets    = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800}
)

// New creates splatd's collectors and registers them on reg; it panics if one
// is registered there already (a wiring bug). routes are the API client's
// route names (api.Routes), pre-initialised so that their 429 series exist
// from the first scrape. build_info carries the binary's module version until
// SetBuildInfo is called.
func New(reg prometheus.Registerer, routes []string) *Metrics {
	m := &Metrics{
		filesDiscovered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "files_discovered_total",
			Help: "Finished-looking files the watcher handed to the queue, each version of a file once (a file the job store refused and a rescan hands over again is not counted again).",
		}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "jobs",
			Help: "Jobs in the queue by stage.",
		}, []string{"stage"}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "jobs_finished_total",
			Help: "Jobs that reached a terminal stage, by result (done, failed, duplicate, held, canceled).",
		}, []string{"result"}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "upload_bytes_total",
			Help: "Bytes written to object storage.",
		}),
		uploadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "upload_duration_seconds",
			Help:    "Duration of completed storage uploads.",
			Buckets: uploadBuckets,
		}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "api_requests_total",
			Help: "Finished API and storage requests by route and HTTP status code (" + CodeNoResponse + " = no response).",
		}, []string{"route", "code"}),
		apiRequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "api_request_duration_seconds",
			Help:    "Duration of API and storage requests by route.",
			Buckets: apiBuckets,
		}, []string{"route"}),
		rateLimitRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "ratelimit_remaining",
			Help: "Latest X-RateLimit-Remaining seen, by rate-limit class.",
		}, []string{"class"}),
		rateLimitWait: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ratelimit_wait_seconds_total",
			Help: "Time requests spent held back by the rate-limit pacer, and jobs parked on a rate-limit hold (counted when they are claimed again).",
		}),
		jobDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "job_duration_seconds",
			Help:    "Time from enqueue to a terminal stage.",
			Buckets: jobBuckets,
		}),
		oldestJobAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "oldest_job_age_seconds",
			Help: "Age of the oldest unfinished job; 0 when there is none.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help: "Always 1; labelled with splatd's version and the Go version that built it.",
		}, []string{"version", "goversion"}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "watch_errors_total",
			Help: "Watcher errors by kind: overflow, watch_limit, instance_limit, notify, add (a folder could not be watched), root (a watch root is missing or unreadable).",
		}, []string{"kind"}),
		watchPolling: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "watch_polling",
			Help: "1 while a watch root runs on the polling fallback instead of file notifications.",
		}),
		tokenRefused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "token_refused",
			Help: "1 while the API refuses the token and the workers are paused.",
		}),
		notifyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "notify_errors_total",
			Help: "Notifications that failed after their last try or were dropped from a full queue, by kind: webhook, exec.",
		}, []string{"kind"}),
		afterActionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "after_action_errors_total",
			Help: "Failed after-actions of finished jobs, by action (receipt, move, delete); each is retried with backoff.",
		}, []string{"action"}),
		configError: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "config_error",
			Help: "1 while a configuration error no retry can fix pauses all work, by kind: tls (certificate does not verify), dns (host name does not resolve), refused (host refuses connections).",
		}, []string{"kind"}),
	}
	upload := func(get func(UploadSource) func() int64) func() float64 {
		return func() float64 {
			if src := m.uploads.Load(); src != nil && get(*src) != nil {
				return float64(get(*src)())
			}
			return 0
		}
	}
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "upload_bandwidth_limit_bytes_per_second",
		Help: "The upload bandwidth limit in force (upload.bandwidth, after reloads and at this hour of its timetable); 0 means none.",
	}, upload(func(s UploadSource) func() int64 { return s.Limit }))
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "upload_bytes_in_flight",
		Help: "Bytes of the uploads in progress still to be sent.",
	}, upload(func(s UploadSource) func() int64 { return s.InFlight }))
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "ready",
		Help: "1 while /readyz says ready, 0 while it does not: watch folders not scanned, the job store failing (a full disk), the token refused, a configuration error; /readyz and the status page say which.",
	}, func() float64 {
		if f := m.ready.Load(); f != nil && (*f)() == nil {
			return 1
		}
		return 0
	})
	reg.MustRegister(limit, inFlight, ready)
	reg.MustRegister(
		m.filesDiscovered, m.jobs, m.jobsFinished, m.uploadBytes, m.uploadDuration,
		m.apiRequests, m.apiRequestDuration, m.rateLimitRemaining, m.rateLimitWait,
		m.jobDuration, m.oldestJobAge, m.buildInfo, m.watchErrors, m.watchPolling, m.tokenRefused,
		m.notifyErrors, m.afterActionErrors, m.configError,
	)
	for _, a := range AfterActions {
		m.afterActionErrors.WithLabelValues(a).Add(0)
	}
	for _, k := range state.ConfigKinds {
		m.configError.WithLabelValues(k).Set(0)
	}

	for _, s := range state.Stages {
		m.jobs.WithLabelValues(string(s)).Set(0)
	}
	for _, r := range Results {
		m.jobsFinished.WithLabelValues(r).Add(0)
	}
	for _, r := range routes {
		m.apiRequestDuration.WithLabelValues(r)
		// 429 is the one code alerts watch from the start; other codes
		// appear as they are answered.
		m.apiRequests.WithLabelValues(r, "429").Add(0)
	}
	for _, k := range WatchErrorKinds {
		m.watchErrors.WithLabelValues(k).Add(0)
	}
	for _, k := range NotifyErrorKinds {
		m.notifyErrors.WithLabelValues(k).Add(0)
	}
	// ratelimit_remaining is deliberately not pre-initialised: a 0 would read
	// as "budget exhausted" before the first response has told us anything.

	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	m.SetBuildInfo(version)
	m.sent.started = time.Now() // today's count starts with the process
	return m
}

// NewRegistry returns a fresh registry holding the Go and process collectors
// and splatd's own, with build_info set to version.
func NewRegistry(version string, routes []string) (*prometheus.Registry, *Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m := New(reg, routes)
	if version != "" {
		m.SetBuildInfo(version)
	}
	return reg, m
}

// SetBuildInfo replaces build_info's labels, keeping a single series.
func (m *Metrics) SetBuildInfo(version string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}

// APIRequest implements api.Observer.
func (m *Metrics) APIRequest(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	c := CodeNoResponse
	if code > 0 {
		c = strconv.Itoa(code)
	}
	m.apiRequests.WithLabelValues(route, c).Inc()
	m.apiRequestDuration.WithLabelValues(route).Observe(d.Seconds())
}

// RateLimit implements api.Observer.
func (m *Metrics) RateLimit(class string, remaining int) {
	if m == nil {
		return
	}
	m.rateLimitRemaining.WithLabelValues(class).Set(float64(remaining))
}

// RateLimitWait implements api.Observer (a request's wait in the pacer) and the
// pool's hook of a parked job's wait.
func (m *Metrics) RateLimitWait(d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.rateLimitWait.Add(d.Seconds())
}

// UploadBytes implements api.Observer.
func (m *Metrics) UploadBytes(n int64) {
	// A counter panics on a negative Add; a retried PUT restarts its own
	// progress, it never un-sends bytes.
	if m == nil || n <= 0 {
		return
	}
	m.uploadBytes.Add(float64(n))
	m.sent.Add(time.Now(), n)
}

// Sent returns the bytes sent in each of the last 60 minutes (oldest
// first), today's and since when today's count (Throughput.Read).
func (m *Metrics) Sent(now time.Time) (minutes []int64, today int64, since time.Time) {
	return m.sent.Read(now)
}

// UploadDone implements api.Observer.
func (m *Metrics) UploadDone(d time.Duration) {
	if m == nil {
		return
	}
	m.uploadDuration.Observe(d.Seconds())
}

// JobFinished implements uploader.Observer.
func (m *Metrics) JobFinished(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.jobsFinished.WithLabelValues(result).Inc()
	if d >= 0 {
		m.jobDuration.Observe(d.Seconds())
	}
}

// FileDiscovered records one candidate file from the watcher.
func (m *Metrics) FileDiscovered() {
	if m == nil {
		return
	}
	m.filesDiscovered.Inc()
}

// WatchError records one watcher error of the given kind (see WatchErrorKinds).
func (m *Metrics) WatchError(kind string) {
	if m == nil {
		return
	}
	m.watchErrors.WithLabelValues(kind).Inc()
}

// NotifyError records one failed or dropped notification of the given kind
// (see NotifyErrorKinds).
func (m *Metrics) NotifyError(kind string) {
	if m == nil {
		return
	}
	m.notifyErrors.WithLabelValues(kind).Inc()
}

// PollingFallback records whether the watcher had to fall back to polling.
func (m *Metrics) PollingFallback(active bool) {
	if m == nil {
		return
	}
	m.watchPolling.Set(boolValue(active))
}

// SetUploadSource sets what the upload gauges read from now on.
func (m *Metrics) SetUploadSource(src UploadSource) {
	if m == nil {
		return
	}
	m.uploads.Store(&src)
}

// SetReadySource sets the check splatd_ready reads at each scrape: /readyz's.
func (m *Metrics) SetReadySource(ready func() error) {
	if m == nil {
		return
	}
	m.ready.Store(&ready)
}

// SetTokenRefused records whether the API currently refuses the token.
func (m *Metrics) SetTokenRefused(refused bool) {
	if m == nil {
		return
	}
	m.tokenRefused.Set(boolValue(refused))
}

// AfterActionError records one failed after-action (see AfterActions).
func (m *Metrics) AfterActionError(action string) {
	if m == nil {
		return
	}
	m.afterActionErrors.WithLabelValues(action).Inc()
}

// ConfigError records whether a configuration error of kind (see
// state.ConfigKinds) currently pauses work.
func (m *Metrics) ConfigError(kind string, active bool) {
	if m == nil {
		return
	}
	m.configError.WithLabelValues(kind).Set(boolValue(active))
}

// SetStages sets the per-stage job counts from the queue's stats. Known
// stages missing from counts are set to 0, so a stage that empties does not
// keep its last value.
func (m *Metrics) SetStages(counts map[state.Stage]int) {
	if m == nil {
		return
	}
	for _, s := range state.Stages {
		if _, ok := counts[s]; !ok {
			m.jobs.WithLabelValues(string(s)).Set(0)
		}
	}
	for s, n := range counts {
		m.jobs.WithLabelValues(string(s)).Set(float64(n))
	}
}

// SetOldestJobAge sets the age of the oldest unfinished job (0 = none).
func (m *Metrics) SetOldestJobAge(d time.Duration) {
	if m == nil {
		return
	}
	if d < 0 {
		d = 0
	}
	m.oldestJobAge.Set(d.Seconds())
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

package metrics

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher"
)

// The watcher declares the hooks it calls; Metrics must keep matching them.
// (The production code does not import watcher: main passes Metrics in.)
var _ watcher.Observer = (*Metrics)(nil)

// exercise calls every hook once so that label sets that are not
// pre-initialised (ratelimit_remaining) exist, as they do in a running daemon
// after its first API response.
func exercise(m *Metrics) {
	m.APIRequest("publish", 201, 120*time.Millisecond)
	m.RateLimit("normal", 119)
	m.RateLimitWait(250 * time.Millisecond)
	m.UploadBytes(1 << 20)
	m.UploadDone(3 * time.Second)
	m.JobFinished("done", 42*time.Second)
	m.FileDiscovered()
	m.WatchError("overflow")
	m.NotifyError("webhook")
	m.PollingFallback(true)
	m.SetTokenRefused(false)
	m.SetStages(map[state.Stage]int{"queued": 1})
	m.SetOldestJobAge(time.Minute)
}

func TestRegistryLint(t *testing.T) {
	t.Parallel()
	reg, m := NewRegistry("v1.2.3", testRoutes)
	exercise(m)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestNewRegistryIsPrivate(t *testing.T) {
	t.Parallel()
	// Two daemons in one process (tests, demo) must not collide, which they
	// would on a shared or default registry.
	_, m1 := NewRegistry("a", testRoutes)
	_, m2 := NewRegistry("b", testRoutes)
	if m1 == m2 {
		t.Fatal("NewRegistry returned the same Metrics twice")
	}
}

func TestBuildInfo(t *testing.T) {
	t.Parallel()
	reg, _ := NewRegistry("v1.2.3", testRoutes)
	want := `
# HELP splatd_build_info Always 1; labelled with splatd's version and the Go version that built it.
# TYPE splatd_build_info gauge
splatd_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "splatd_build_info"); err != nil {
		t.Error(err)
	}
}

func TestPreinitialisedSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg, testRoutes)
	counts := map[string]int{
		"splatd_jobs":                         len(state.Stages),
		"splatd_jobs_finished_total":          len(Results),
		"splatd_api_requests_total":           len(testRoutes), // the 429 series
		"splatd_api_request_duration_seconds": len(testRoutes),
		"splatd_watch_errors_total":           len(WatchErrorKinds),
		"splatd_notify_errors_total":          len(NotifyErrorKinds),
		"splatd_ratelimit_remaining":          0, // a 0 would read as "exhausted"
		"splatd_build_info":                   1,
		"splatd_after_action_errors_total":    3, // receipt, move, delete
		"splatd_config_error":                 len(state.ConfigKinds),
		// read at each scrape; 0 until the daemon sets their source
		"splatd_upload_bandwidth_limit_bytes_per_second": 1,
		"splatd_upload_bytes_in_flight":                  1,
	}
	for name, want := range counts {
		got, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s: %d series at start, want %d", name, got, want)
		}
	}
}

func TestObserverHooks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		call   func(m *Metrics)
		metric func(m *Metrics) prometheus.Collector
		want   float64
	}{
		{"api request code", func(m *Metrics) {
			m.APIRequest("signed_url", 200, time.Second)
			m.APIRequest("signed_url", 200, time.Second)
		},
			func(m *Metrics) prometheus.Collector { return m.apiRequests.WithLabelValues("signed_url", "200") }, 2},
		{"api request 429", func(m *Metrics) { m.APIRequest("publish", 429, time.Second) },
			func(m *Metrics) prometheus.Collector { return m.apiRequests.WithLabelValues("publish", "429") }, 1},
		{"api request without response", func(m *Metrics) { m.APIRequest("storage_put", 0, time.Second) },
			func(m *Metrics) prometheus.Collector {
				return m.apiRequests.WithLabelValues("storage_put", CodeNoResponse)
			}, 1},
		{"rate limit remaining", func(m *Metrics) { m.RateLimit("strict", 7); m.RateLimit("strict", 4) },
			func(m *Metrics) prometheus.Collector { return m.rateLimitRemaining.WithLabelValues("strict") }, 4},
		{"rate limit wait", func(m *Metrics) { m.RateLimitWait(1500 * time.Millisecond); m.RateLimitWait(500 * time.Millisecond) },
			func(m *Metrics) prometheus.Collector { return m.rateLimitWait }, 2},
		{"rate limit wait ignores negative", func(m *Metrics) { m.RateLimitWait(-time.Second) },
			func(m *Metrics) prometheus.Collector { return m.rateLimitWait }, 0},
		{"upload bytes", func(m *Metrics) { m.UploadBytes(100); m.UploadBytes(23); m.UploadBytes(-5) },
			func(m *Metrics) prometheus.Collector { return m.uploadBytes }, 123},
		{"job finished", func(m *Metrics) { m.JobFinished("duplicate", time.Minute) },
			func(m *Metrics) prometheus.Collector { return m.jobsFinished.WithLabelValues("duplicate") }, 1},
		{"job finished other result untouched", func(m *Metrics) { m.JobFinished("duplicate", time.Minute) },
			func(m *Metrics) prometheus.Collector { return m.jobsFinished.WithLabelValues("done") }, 0},
		{"file discovered", func(m *Metrics) { m.FileDiscovered(); m.FileDiscovered(); m.FileDiscovered() },
			func(m *Metrics) prometheus.Collector { return m.filesDiscovered }, 3},
		{"watch error", func(m *Metrics) { m.WatchError("scan") },
			func(m *Metrics) prometheus.Collector { return m.watchErrors.WithLabelValues("scan") }, 1},
		{"notify error", func(m *Metrics) { m.NotifyError("exec"); m.NotifyError("exec") },
			func(m *Metrics) prometheus.Collector { return m.notifyErrors.WithLabelValues("exec") }, 2},
		{"polling on", func(m *Metrics) { m.PollingFallback(true) },
			func(m *Metrics) prometheus.Collector { return m.watchPolling }, 1},
		{"polling off again", func(m *Metrics) { m.PollingFallback(true); m.PollingFallback(false) },
			func(m *Metrics) prometheus.Collector { return m.watchPolling }, 0},
		{"token refused", func(m *Metrics) { m.SetTokenRefused(true) },
			func(m *Metrics) prometheus.Collector { return m.tokenRefused }, 1},
		{"stages set", func(m *Metrics) { m.SetStages(map[state.Stage]int{"signed": 3}) },
			func(m *Metrics) prometheus.Collector { return m.jobs.WithLabelValues("signed") }, 3},
		{"stage that empties goes to zero", func(m *Metrics) {
			m.SetStages(map[state.Stage]int{"queued": 5})
			m.SetStages(map[state.Stage]int{"ready": 1})
		}, func(m *Metrics) prometheus.Collector { return m.jobs.WithLabelValues("queued") }, 0},
		{"oldest job age", func(m *Metrics) { m.SetOldestJobAge(90 * time.Second) },
			func(m *Metrics) prometheus.Collector { return m.oldestJobAge }, 90},
		{"oldest job age clamps negative", func(m *Metrics) { m.SetOldestJobAge(-time.Second) },
			func(m *Metrics) prometheus.Collector { return m.oldestJobAge }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := New(prometheus.NewRegistry(), testRoutes)
			tt.call(m)
			if got := testutil.ToFloat64(tt.metric(m)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHistogramHooks(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, testRoutes)
	m.APIRequest("get_splat", 200, 300*time.Millisecond)
	m.UploadDone(10 * time.Second)
	m.UploadDone(20 * time.Second)
	m.JobFinished("failed", 2*time.Minute)

	tests := []struct {
		name   string
		labels map[string]string
		count  uint64
		sum    float64
	}{
		{"splatd_api_request_duration_seconds", map[string]string{"route": "get_splat"}, 1, 0.3},
		{"splatd_upload_duration_seconds", nil, 2, 30},
		{"splatd_job_duration_seconds", nil, 1, 120},
	}
	for _, tt := range tests {
		h := findHistogram(t, reg, tt.name, tt.labels)
		if h.GetSampleCount() != tt.count || h.GetSampleSum() != tt.sum {
			t.Errorf("%s%v: count %d sum %v, want %d and %v", tt.name, tt.labels, h.GetSampleCount(), h.GetSampleSum(), tt.count, tt.sum)
		}
	}
}

func findHistogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return mt.GetHistogram()
		}
	}
	t.Fatalf("no histogram %s%v", name, labels)
	return nil
}

func TestNilMetricsIsNoop(t *testing.T) {
	t.Parallel()
	var m *Metrics
	exercise(m) // must not panic
	m.SetBuildInfo("x")
}

// testRoutes stands for the client's route names (api.Routes), which
// metrics does not import.
var testRoutes = []string{"signed_url", "storage_put", "publish", "get_splat", "checkpoints"}

// TestStageHooks: the after-action and configuration-error hooks move their
// series (issue 15: both used to be a log line only).
func TestStageHooks(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, testRoutes)
	m.AfterActionError("move")
	m.AfterActionError("move")
	m.ConfigError(state.ConfigTLS, true)
	if got := testutil.ToFloat64(m.afterActionErrors.WithLabelValues("move")); got != 2 {
		t.Errorf("after_action_errors_total{action=move} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.configError.WithLabelValues(state.ConfigTLS)); got != 1 {
		t.Errorf("config_error{kind=tls} = %v, want 1", got)
	}
	m.ConfigError(state.ConfigTLS, false)
	if got := testutil.ToFloat64(m.configError.WithLabelValues(state.ConfigTLS)); got != 0 {
		t.Errorf("config_error{kind=tls} after it cleared = %v, want 0", got)
	}
}

// TestUploadGauges: the bandwidth limit and the bytes in flight are read
// from their source at each scrape, so a reload's new limit shows at the
// next scrape; without a source both read 0.
func TestUploadGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, testRoutes)
	const limitName, inFlightName = "splatd_upload_bandwidth_limit_bytes_per_second", "splatd_upload_bytes_in_flight"
	check := func(wantLimit, wantInFlight int64) {
		t.Helper()
		want := fmt.Sprintf(`# HELP %[1]s The upload bandwidth limit in force (upload.bandwidth, after reloads and at this hour of its timetable); 0 means none.
# TYPE %[1]s gauge
%[1]s %[3]d
# HELP %[2]s Bytes of the uploads in progress still to be sent.
# TYPE %[2]s gauge
%[2]s %[4]d
`, limitName, inFlightName, wantLimit, wantInFlight)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), limitName, inFlightName); err != nil {
			t.Error(err)
		}
	}
	check(0, 0)
	var limit, inFlight atomic.Int64
	m.SetUploadSource(UploadSource{Limit: limit.Load, InFlight: inFlight.Load})
	limit.Store(2 << 20)
	inFlight.Store(12345)
	check(2<<20, 12345)
	limit.Store(4 << 20) // a reload
	inFlight.Store(0)
	check(4<<20, 0)
}

// TestReadyGauge: splatd_ready reads /readyz's check at each scrape: 0
// before one is set and while it fails (a full state disk), 1 once it
// passes.
func TestReadyGauge(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, nil)
	want := func(v string) {
		t.Helper()
		exp := "# HELP splatd_ready " + readyHelp(t, reg) + "\n# TYPE splatd_ready gauge\nsplatd_ready " + v + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "splatd_ready"); err != nil {
			t.Error(err)
		}
	}
	want("0")
	var failing atomic.Bool
	failing.Store(true)
	m.SetReadySource(func() error {
		if failing.Load() {
			return errors.New("the job store fails: no space left on device")
		}
		return nil
	})
	want("0")
	failing.Store(false)
	want("1")
}

// readyHelp is splatd_ready's help text as registered.
func readyHelp(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "splatd_ready" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no splatd_ready")
	return ""
}

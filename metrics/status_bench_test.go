package metrics

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// manyJobs returns a source holding n jobs, most recently updated first: a
// long-running daemon's state, mostly done, with some failures and a few
// jobs on their way.
func manyJobs(n int) *fakeSource {
	src := &fakeSource{status: Status{Version: "bench", Protocol: "v1", Token: Token{State: TokenOK}}}
	src.status.Queue = map[state.Stage]int{}
	now := time.Now().UTC()
	for i := range n {
		j := Job{
			ID:        uint64(n - i),
			Path:      fmt.Sprintf("/srv/captures/client-%03d/scan-%05d.ply", i%97, n-i),
			Stage:     state.Done,
			UpdatedAt: now.Add(-time.Duration(i) * time.Second),
		}
		switch {
		case i < 4:
			j.Stage = state.Signed
			j.Progress = &Progress{Sent: int64(i) << 20, Size: 64 << 20}
		case i < 20:
			j.Stage = state.Queued
		case i%50 == 0:
			j.Stage, j.Attempts = state.Failed, 3
			j.FailReason = "storage PUT https://st.example/k?X-Amz-Signature=0123456789abcdef: 403 AccessDenied"
		default:
			j.ViewerURL = fmt.Sprintf("https://viewer.example/view?id=h%d", n-i)
		}
		src.jobs = append(src.jobs, j)
		src.status.Queue[j.Stage]++
	}
	return src
}

func benchGet(b *testing.B, target string) {
	h := statusHandler(b, ServerOptions{Status: manyJobs(10_000)}, true)
	b.ReportAllocs()
	for b.Loop() {
		if r := do(b, h, target); r.code != http.StatusOK {
			b.Fatalf("%s = %d %s", target, r.code, r.body)
		}
	}
}

// BenchmarkStatusPage is the static page: it holds no data.
func BenchmarkStatusPage(b *testing.B) { benchGet(b, "/") }

// BenchmarkAPIStatus is /api/status.
func BenchmarkAPIStatus(b *testing.B) { benchGet(b, "/api/status") }

// BenchmarkAPIJobs is /api/jobs unasked: every stage, the default limit of
// 200 of the 10,000 jobs.
func BenchmarkAPIJobs(b *testing.B) { benchGet(b, "/api/jobs") }

// BenchmarkAPIJobsMax is /api/jobs?limit=1000, the most one answer carries.
func BenchmarkAPIJobsMax(b *testing.B) { benchGet(b, "/api/jobs?limit=1000") }

// BenchmarkPageRefresh is what one refresh of the page costs the daemon:
// its four requests.
func BenchmarkPageRefresh(b *testing.B) {
	h := statusHandler(b, ServerOptions{Status: manyJobs(10_000)}, true)
	targets := []string{
		"/api/status",
		"/api/jobs?stage=ready,signed,uploaded,publishing,processing&limit=50",
		"/api/jobs?stage=done&limit=20",
		"/api/jobs?stage=failed,held&limit=50",
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, target := range targets {
			if r := do(b, h, target); r.code != http.StatusOK {
				b.Fatalf("%s = %d %s", target, r.code, r.body)
			}
		}
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// e2eBandwidth is the bandwidth block of /api/status.
type e2eBandwidth struct {
	Limit    int64   `json:"limit_bytes_per_second"`
	Rate     float64 `json:"rate_bytes_per_second"`
	InFlight int64   `json:"in_flight_bytes"`
}

// statusBandwidth reads the bandwidth of /api/status and the two upload
// gauges of /metrics.
func statusBandwidth(t *testing.T, addr string) (bw e2eBandwidth, limitMetric, inFlightMetric float64) {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/api/status")
	var st struct {
		Bandwidth *e2eBandwidth `json:"bandwidth"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Bandwidth == nil {
		t.Fatalf("/api/status = %d %s", code, body)
	}
	_, text := httpGet(t, "http://"+addr+"/metrics")
	var ok1, ok2 bool
	limitMetric, ok1 = promSample(text, "splatd_upload_bandwidth_limit_bytes_per_second", nil)
	inFlightMetric, ok2 = promSample(text, "splatd_upload_bytes_in_flight", nil)
	if !ok1 || !ok2 {
		t.Fatalf("/metrics lacks the upload bandwidth gauges:\n%s", grepLines(text, "splatd_upload"))
	}
	return *st.Bandwidth, limitMetric, inFlightMetric
}

// TestE2EBandwidthVisible: /api/status and /metrics show the bandwidth limit
// in force, as each reload sets it (none → 2 MiB/s → 4 MiB/s), and during an
// upload the current rate and the bytes still to send, under both protocols.
func TestE2EBandwidthVisible(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"legacy", "v1"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			sim := newE2ESim(t, apisim.Options{})
			e := newE2EEnv(t, sim, e2eConfig{})
			base := readFile(t, e.cfgPath)
			base = strings.Replace(base, "api:\n", "api:\n  protocol: "+protocol+"\n", 1)
			writeConfig(t, e.cfgPath, base)
			d := startDaemon(t, e.cfgPath)
			addr := d.waitStarted()

			if bw, lm, _ := statusBandwidth(t, addr); bw.Limit != 0 || lm != 0 {
				t.Errorf("at start without a limit: /api/status %+v, metric %v; want 0", bw, lm)
			}
			for _, limit := range []string{"2MiB/s", "4MiB/s", "256KiB/s"} {
				writeConfig(t, e.cfgPath, base+"upload: {bandwidth: "+limit+"}\n")
				if code, out, errOut := runCLI(t, nil, "reload", "-config", e.cfgPath); code != 0 || !strings.Contains(out, "upload.bandwidth") {
					t.Fatalf("reload to %s: exit %d, stdout %q, stderr %q", limit, code, out, errOut)
				}
				want := map[string]int64{"2MiB/s": 2 << 20, "4MiB/s": 4 << 20, "256KiB/s": 256 << 10}[limit]
				if bw, lm, _ := statusBandwidth(t, addr); bw.Limit != want || int64(lm) != want {
					t.Errorf("after a reload to %s: /api/status %+v, metric %v; want %d", limit, bw, lm, want)
				}
			}

			// About 4 s at 256 KiB/s: the rate and the bytes to go show
			// while it runs.
			file := filepath.Join(e.inbox, "big.ply")
			size := writeBigPLY(t, file, 1<<20)
			var seen e2eBandwidth
			var seenMetric float64
			waitFor(t, "a rate and bytes in flight during the upload", func() bool {
				bw, _, inFlight := statusBandwidth(t, addr)
				if bw.Rate > 0 && bw.InFlight > 0 && inFlight > 0 {
					seen, seenMetric = bw, inFlight
					return true
				}
				return false
			})
			if seen.InFlight > size || seenMetric > float64(size) || seen.Rate > 2*(256<<10) {
				t.Errorf("during the upload of %d bytes at 256 KiB/s: /api/status %+v, metric in flight %v", size, seen, seenMetric)
			}
			waitReceipt(t, file, "done")
			if bw, _, inFlight := statusBandwidth(t, addr); bw.InFlight != 0 || inFlight != 0 {
				t.Errorf("after the upload: /api/status %+v, metric in flight %v; want 0 in flight", bw, inFlight)
			}
			if code := d.stop(); code != 0 {
				t.Errorf("splatd exited %d", code)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

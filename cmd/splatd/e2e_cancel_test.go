package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/uploader/apisim"
)

// storageGate stalls the simulator's storage reads: its Sleep (the
// bandwidth cap's wait, called after each read of at most 16 KiB) blocks
// until the gate opens or the request ends. It remembers the requests it
// saw, so that a test knows how many storage PUTs started.
type storageGate struct {
	mu      sync.Mutex
	started map[context.Context]bool
	open    chan struct{}
}

func newStorageGate() *storageGate {
	return &storageGate{started: map[context.Context]bool{}, open: make(chan struct{})}
}

func (g *storageGate) sleep(ctx context.Context, _ time.Duration) error {
	g.mu.Lock()
	g.started[ctx] = true
	g.mu.Unlock()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *storageGate) puts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.started)
}

// TestE2ECancelStopsBytes: `splatd cancel` of a job whose upload is under
// way cuts the upload at once, in both protocols. Storage is stalled (it
// reads one chunk per PUT, then waits); the job is canceled; then storage
// reads as fast as it can until every PUT has ended. The bytes it received
// in all are what went out after the cancel plus one chunk per PUT: a
// daemon that let the PUT run on sends the whole file. The webhook gets
// the job's canceled event once.
func TestE2ECancelStopsBytes(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"legacy", "v1"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			gate := newStorageGate()
			sim := newE2ESim(t, apisim.Options{
				StorageBandwidth: 64 << 10, // every read of a chunk waits: the gate
				Sleep:            gate.sleep,
				PartSize:         16 << 20,
			})
			// One part PUT at a time: a part in flight at the cancel is the
			// most bytes v1 had left to send before (16 MiB).
			hook := newHookReceiver(t)
			e := newE2EEnv(t, sim, e2eConfig{extra: "upload: {parallel_parts: 1}\nnotify: {webhook: \"" + hook.srv.URL + "\"}\n"})
			// The request timeout must not be what ends the stalled PUT.
			cfg, err := os.ReadFile(e.cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			api := "api:\n  protocol: " + proto + "\n"
			writeConfig(t, e.cfgPath, strings.Replace(strings.Replace(string(cfg), "timeout: 30s", "timeout: 1h", 1), "api:\n", api, 1))
			d := startDaemon(t, e.cfgPath)
			d.waitStarted()
			big := filepath.Join(e.inbox, "big.ply")
			size := writeBigPLY(t, big, 48<<20)

			var id uint64
			waitFor(t, "the upload under way", func() bool {
				jobs, _ := adminJobs(t, e.stateDir)
				for _, j := range jobs {
					if j.File == big {
						id = j.ID
					}
				}
				return id != 0 && gate.puts() > 0
			})
			code, out, errOut := runCLI(t, nil, "cancel", "-config", e.cfgPath, fmt.Sprint(id))
			if code != 0 || !strings.Contains(out, "canceled") {
				t.Fatalf("cancel %d: exit %d, stdout %q, stderr %q", id, code, out, errOut)
			}
			// The worker lets go of the job once its upload is cut (a PUT
			// that ran on would hold it until storage had read it all).
			d.waitLogLine("job changed by an operator; its step's outcome is dropped")
			close(gate.open)
			var received int64
			waitFor(t, "every storage PUT to end", func() bool {
				st := sim.Stats()
				if st.Total(apisim.RouteStoragePut)+st.Total(apisim.RoutePartPut) < gate.puts() {
					return false
				}
				received = 0
				for _, c := range st.StorageConns {
					received += c.Bytes
				}
				return true
			})
			// The socket buffers (up to 4 MiB by Linux's tcp_wmem) hold
			// what was written before the cut; the rest of the file must
			// never go out.
			if limit := int64(8 << 20); received > limit {
				t.Errorf("storage received %d of the file's %d bytes: the upload went on after the cancel (limit %d)", received, size, limit)
			}
			t.Logf("%s: storage received %d bytes of %d in %d PUT(s)", proto, received, size, gate.puts())
			jobs, _ := adminJobs(t, e.stateDir)
			for _, j := range jobs {
				if j.ID == id && (j.Stage != "canceled" || j.Sent != 0) {
					t.Errorf("job after cancel: %+v, want canceled with no progress", j)
				}
			}
			waitFor(t, "the canceled event", func() bool { return len(hook.gotEvents()) > 0 })
			if code := d.stop(); code != 0 {
				t.Errorf("splatd exited %d", code)
			}
			if got := hook.gotEvents(); !slices.Equal(got, []string{"canceled big.ply"}) {
				t.Errorf("webhook events %q; want one \"canceled big.ply\"", got)
			}
		})
	}
}

// TestE2EJobsUploading: a job whose bytes are going out reads "uploading"
// with its bytes, rate and ETA in `splatd jobs` (table and JSON) and in
// /api/jobs; `jobs -state uploading` selects it; once canceled it shows
// no percentage.
func TestE2EJobsUploading(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{StorageBandwidth: 256 << 10}) // 8 MiB: about 30 s
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()
	big := filepath.Join(e.inbox, "big.ply")
	writeBigPLY(t, big, 8<<20)

	var j daemon.JobView
	waitFor(t, "jobs -json to show the upload with a rate and an ETA", func() bool {
		code, out, _ := runCLI(t, nil, "jobs", "-json", "-state", "uploading", "-config", e.cfgPath)
		var views []daemon.JobView
		if code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 1 {
			return false
		}
		j = views[0]
		return j.Rate > 0 && j.ETA > 0
	})
	if j.Stage != "signed" || !strings.HasPrefix(j.Activity, "uploading ") || j.File != big || j.Sent <= 0 || j.Sent > j.Size {
		t.Errorf("uploading job = %+v", j)
	}
	code, out, errOut := runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "signed") || !strings.Contains(out, "uploading ") || !strings.Contains(out, "/s, ETA ") || !strings.Contains(out, "MiB") {
		t.Errorf("jobs: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	_, body := httpGet(t, "http://"+addr+"/api/jobs")
	var list struct {
		Jobs []struct {
			ID       uint64 `json:"id"`
			Stage    string `json:"stage"`
			Activity string `json:"activity"`
			Progress *struct {
				Sent int64   `json:"sent"`
				Rate float64 `json:"rate_bytes_per_second"`
			} `json:"progress"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("/api/jobs: %v, %s", err, body)
	}
	if a := list.Jobs[0]; a.Stage != "signed" || !strings.HasPrefix(a.Activity, "uploading ") || a.Progress == nil || a.Progress.Sent <= 0 {
		t.Errorf("/api/jobs job = %+v", a)
	}

	code, _, errOut = runCLI(t, nil, "cancel", "-config", e.cfgPath, fmt.Sprint(j.ID))
	if code != 0 {
		t.Fatalf("cancel: exit %d, %s", code, errOut)
	}
	code, out, _ = runCLI(t, nil, "jobs", "-config", e.cfgPath)
	if code != 0 || !strings.Contains(out, "canceled") || strings.Contains(out, "%") {
		t.Errorf("jobs after cancel (no stale percentage):\n%s", out)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

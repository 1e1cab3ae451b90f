package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2EStatusEndpoints: the daemon's /api/status and /api/jobs show a job
// the simulator published, with its viewer link, and the failure of an
// invalid file with its reason; the page at / is served; no token and no
// signed URL's query appears in any of them.
func TestE2EStatusEndpoints(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	addr := d.waitStarted()

	good := filepath.Join(e.inbox, "hall.ply")
	writePLY(t, good, 1500)
	bad := filepath.Join(e.inbox, "notes.ply")
	if err := os.WriteFile(bad, []byte("not a splat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := waitReceipt(t, good, "done")
	waitReceipt(t, bad, "failed")

	code, body := httpGet(t, "http://"+addr+"/api/jobs?stage=done,failed")
	if code != 200 {
		t.Fatalf("/api/jobs = %d %s", code, body)
	}
	jobsBody := body
	var list struct {
		Jobs []struct {
			Path       string `json:"path"`
			Stage      string `json:"stage"`
			ViewerURL  string `json:"viewer_url"`
			FailReason string `json:"fail_reason"`
		} `json:"jobs"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("/api/jobs: %v in %s", err, body)
	}
	seen := map[string]bool{}
	for _, j := range list.Jobs {
		switch j.Path {
		case good:
			seen["good"] = j.Stage == "done" && j.ViewerURL == r.Splat.URL && j.ViewerURL != ""
		case bad:
			seen["bad"] = j.Stage == "failed" && strings.Contains(j.FailReason, "invalid file")
		}
	}
	if !seen["good"] || !seen["bad"] || list.Total != 2 {
		t.Errorf("/api/jobs = %s; want the done job with its link %q and the failed one with its reason", body, r.Splat.URL)
	}

	code, body = httpGet(t, "http://"+addr+"/api/status")
	var st struct {
		Protocol string         `json:"protocol"`
		Queue    map[string]int `json:"queue"`
		Watched  []struct {
			Path string `json:"path"`
		} `json:"watched"`
		Token struct {
			State string `json:"state"`
		} `json:"token"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/api/status = %d %s", code, body)
	}
	if st.Protocol != "legacy" || st.Queue["done"] != 1 || st.Queue["failed"] != 1 || len(st.Watched) != 1 || st.Watched[0].Path != e.inbox || st.Token.State != "ok" {
		t.Errorf("/api/status = %s", body)
	}
	code, page := httpGet(t, "http://"+addr+"/")
	if code != 200 || !strings.Contains(page, "/api/jobs") {
		t.Errorf("/ = %d, want the status page", code)
	}
	if code, _ := httpGet(t, "http://"+addr+"/api/jobs?stage=nonsense"); code != 400 {
		t.Errorf("/api/jobs?stage=nonsense = %d, want 400", code)
	}
	for _, text := range []string{jobsBody, body, page} {
		assertNoSecrets(t, text, sim.Token(), "sig=", "X-Amz-Signature")
	}
}

// TestE2ESplats: `splatd splats -all` pages through the account's splats
// by offset (limit 2 forces several pages) and lists each once, newest
// first, with its viewer link; a bad -limit is a usage error.
func TestE2ESplats(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	var files []string
	for i := range 5 {
		p := filepath.Join(e.dir, fmt.Sprintf("s%d.ply", i))
		writePLY(t, p, 1100+i)
		files = append(files, p)
	}
	if code, _, errOut := runCLI(t, nil, append([]string{"publish", "-config", e.cfgPath}, files...)...); code != 0 {
		t.Fatalf("publish: exit %d, %s", code, errOut)
	}
	code, out, errOut := runCLI(t, nil, "splats", "-config", e.cfgPath, "-all", "-limit", "2", "-json")
	var list []struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		ViewerURL string `json:"viewerUrl"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("splats -all -json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if len(list) != 5 {
		t.Fatalf("splats -all listed %d splats, want 5: %s", len(list), out)
	}
	seen := map[string]bool{}
	for _, s := range list {
		if seen[s.ID] || s.ViewerURL == "" {
			t.Errorf("splat %+v listed twice or without a viewer link", s)
		}
		seen[s.ID] = true
	}
	if list[0].Title != "s4" {
		t.Errorf("first splat %q, want the newest (s4)", list[0].Title)
	}
	code, out, errOut = runCLI(t, nil, "splats", "-config", e.cfgPath, "-limit", "129")
	if code != 2 || !strings.Contains(errOut, "-limit") || out != "" {
		t.Errorf("splats -limit 129: exit %d, stdout %q, stderr %q; want 2 and the reason", code, out, errOut)
	}
}

// TestE2EPublishAndDemoV1: under api.protocol v1, `splatd publish` sends a
// multi-part file through an upload session (parts in parallel, complete)
// and prints its viewer link; `splatd demo -protocol v1` passes.
func TestE2EPublishAndDemoV1(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{PartSize: 64 << 10})
	e := newE2EEnv(t, sim, e2eConfig{protocol: "v1", extra: "upload: {parallel_parts: 3}\n"})
	file := filepath.Join(e.dir, "big.ply")
	writePLY(t, file, 8000) // several 64 KiB parts
	code, out, errOut := runCLI(t, nil, "publish", "-config", e.cfgPath, file)
	if code != 0 || !strings.Contains(out, "/scene/") {
		t.Fatalf("publish under v1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	st := sim.Stats()
	if st.Creates != 1 || st.V1Splats != 1 || st.PartPuts < 3 || st.Uploads != 0 || st.StorageAuthHeaders != 0 || st.UnknownFields != 0 {
		t.Errorf("simulator after a v1 publish: %d creates, %d splats, %d part PUTs, %d legacy uploads, %d Authorization at storage, %d unknown fields",
			st.Creates, st.V1Splats, st.PartPuts, st.Uploads, st.StorageAuthHeaders, st.UnknownFields)
	}

	code, out, errOut = runCLI(t, nil, "demo", "-protocol", "v1", "-dir", t.TempDir())
	if code != 0 || !strings.Contains(out, "demo passed") || !strings.Contains(out, "hangar.ply") || !strings.Contains(out, "upload sessions") {
		t.Errorf("demo -protocol v1: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// TestE2EFoldersFiltersAndNotifications runs the daemon over two watch
// folders: one with the global settings, one with its own publish and
// after blocks, a size filter, a folder .splat.yaml and a command; a
// webhook on loopback hears every final job. Neither the webhook nor the
// command ever sees the API token.
func TestE2EFoldersFiltersAndNotifications(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	dir := t.TempDir()
	inbox, clientA := filepath.Join(dir, "inbox"), filepath.Join(dir, "clientA")
	doneA, hookOut := filepath.Join(dir, "doneA"), filepath.Join(dir, "hook-out")
	for _, d := range []string{inbox, clientA, filepath.Join(clientA, "rig2"), hookOut} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tokenFile, headers := filepath.Join(dir, "token"), filepath.Join(dir, "webhook-headers")
	mustWrite(t, tokenFile, sim.Token()+"\n")
	mustWrite(t, headers, "# the receiver's own secret\nAuthorization: Bearer hook-secret\n")

	var mu sync.Mutex
	var events []map[string]any
	var raw strings.Builder
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev map[string]any
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		defer mu.Unlock()
		_ = r.Header.Write(&raw)
		raw.Write(b)
		if r.Header.Get("Authorization") != "Bearer hook-secret" {
			t.Errorf("webhook request without the configured header: %v", r.Header)
		}
		events = append(events, ev)
	}))
	defer hook.Close()

	cfg := filepath.Join(dir, "config.yaml")
	mustWrite(t, cfg, fmt.Sprintf(`api: {base_url: %s, ca_file: %s, token_file: %s, timeout: 30s}
watch:
  - path: %s
  - path: %s
    min_size: 1KiB
    publish: {title: "A {{.Stem}}", format: compressed.ply}
    after:
      on_success: move
      success_dir: %s
      exec: [sh, -c, 'cat > "$0/$SPLATD_JOB-$SPLATD_EVENT.json"; env > "$0/$SPLATD_JOB.env"', %s]
settle: 300ms
state_dir: %s
poll: {interval: 200ms, max_interval: 500ms, timeout: 5m}
metrics: {listen: "127.0.0.1:0"}
log: {level: info, format: json}
notify: {webhook: "%s/hook", webhook_headers_file: %s}
`, sim.URL(), sim.CAFile(), tokenFile, inbox, clientA, doneA, hookOut, filepath.Join(dir, "state"), hook.URL, headers))

	// The token is in the daemon's environment too: a command must not inherit it.
	d := startDaemon(t, cfg, "SPLATD_TOKEN="+sim.Token())
	d.waitStarted()

	mustWrite(t, filepath.Join(clientA, "rig2", ".splat.yaml"), "title: \"Rig 2 {{.Stem}}\"\ndescription: rig two\n")
	writePLY(t, filepath.Join(clientA, "rig2", "scan.ply"), 700)
	mustWrite(t, filepath.Join(clientA, "tiny.ply"), "ply\n") // under min_size: skipped, never a job
	writePLY(t, filepath.Join(inbox, "lobby.ply"), 701)

	moved := filepath.Join(doneA, "rig2", "scan.ply")
	ra := waitReceipt(t, moved, "done", "failed")
	if ra.Status != "done" || ra.Title != "Rig 2 scan" || ra.Format != "compressed.ply" || ra.File != moved {
		t.Errorf("clientA receipt: %+v", ra)
	}
	rb := waitReceipt(t, filepath.Join(inbox, "lobby.ply"), "done", "failed")
	if rb.Status != "done" || rb.Title != "lobby" || rb.Format != "sog" {
		t.Errorf("inbox receipt: %+v", rb)
	}
	d.waitLogLine("file outside the folder's size bounds; skipped")
	if _, ok := readReceipt(t, filepath.Join(clientA, "tiny.ply")); ok {
		t.Error("the file under min_size has a receipt")
	}

	waitFor(t, "two webhook events", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) >= 2 })
	waitFor(t, "the command's two files", func() bool {
		ents, _ := os.ReadDir(hookOut)
		return len(ents) >= 2
	})
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}

	mu.Lock()
	files := map[string]string{}
	for _, ev := range events {
		files[fmt.Sprint(ev["file"])] = fmt.Sprint(ev["event"], " ", ev["title"])
	}
	if len(events) != 2 || files[moved] != "done Rig 2 scan" || files[filepath.Join(inbox, "lobby.ply")] != "done lobby" {
		t.Errorf("webhook events: %v", events)
	}
	if strings.Contains(raw.String(), sim.Token()) {
		t.Error("the webhook received the API token")
	}
	mu.Unlock()

	ents, _ := os.ReadDir(hookOut)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		b, _ := os.ReadFile(filepath.Join(hookOut, e.Name()))
		if strings.Contains(string(b), sim.Token()) {
			t.Errorf("the command saw the API token in %s", e.Name())
		}
		if strings.HasSuffix(e.Name(), ".env") && !strings.Contains(string(b), "SPLATD_FILE="+moved+"\n") {
			t.Errorf("command environment lacks SPLATD_FILE=%s:\n%s", moved, b)
		}
		if strings.HasSuffix(e.Name(), "-done.json") && !strings.Contains(string(b), `"title":"Rig 2 scan"`) {
			t.Errorf("command stdin: %s", b)
		}
	}
	if len(names) != 2 {
		t.Errorf("command output files %q: want one run, for the clientA job only", names)
	}
	assertNoSecrets(t, d.log(), sim.Token())
}

func mustWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

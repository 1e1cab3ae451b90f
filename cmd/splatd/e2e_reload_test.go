package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
)

// hookReceiver is a webhook that records the file name of each event, and
// each event as "event name".
type hookReceiver struct {
	mu     sync.Mutex
	files  []string
	events []string
	srv    *httptest.Server
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Event string `json:"event"`
			File  string `json:"file"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &ev)
		h.mu.Lock()
		h.files = append(h.files, filepath.Base(ev.File))
		h.events = append(h.events, ev.Event+" "+filepath.Base(ev.File))
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.files)
}

func (h *hookReceiver) gotEvents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// TestE2EReloadNotifyAndExec: after.exec added by a reload runs, removed
// stops running; notify.webhook changed by a reload takes the events from
// then on; publish.title and log.level changed by a reload act on the next
// job; reload's answer names what it applied.
func TestE2EReloadNotifyAndExec(t *testing.T) {
	t.Parallel()
	needSh(t)
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	base := readFile(t, e.cfgPath)
	hook1, hook2 := newHookReceiver(t), newHookReceiver(t)
	log := filepath.Join(e.dir, "exec.log")
	script := filepath.Join(e.dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$1 $(basename \"$SPLATD_FILE\")\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := func(webhook, label string) string {
		c := base + "notify: {webhook: \"" + webhook + "\"}\n"
		if label != "" {
			c += "publish: {title: \"" + label + " {{.Stem}}\"}\n"
			c = strings.Replace(c, "level: info", "level: debug", 1)
		}
		if label != "" {
			c += fmt.Sprintf("after: {exec: [%q, %q]}\n", script, label)
		}
		return c
	}
	reload := func(cfg string, want ...string) {
		t.Helper()
		writeConfig(t, e.cfgPath, cfg)
		code, out, errOut := runCLI(t, nil, "reload", "-config", e.cfgPath)
		if code != 0 || strings.Contains(out, "need a restart") {
			t.Fatalf("reload: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		for _, k := range want {
			if !strings.Contains(out, k) {
				t.Errorf("reload printed %q; want %s among the keys applied", out, k)
			}
		}
	}
	publish := func(name string, hook *hookReceiver) e2eReceipt {
		t.Helper()
		f := filepath.Join(e.inbox, name)
		writePLY(t, f, 1000+int(name[0])) // distinct content: not a duplicate
		r := waitReceipt(t, f, "done")
		waitFor(t, "the webhook event of "+name, func() bool { return slices.Contains(hook.got(), name) })
		return r
	}

	writeConfig(t, e.cfgPath, config(hook1.srv.URL, ""))
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	publish("a.ply", hook1) // no command yet
	if strings.Contains(d.log(), "webhook delivered") {
		t.Fatal("a debug line at log.level info")
	}

	reload(config(hook2.srv.URL, "A"), "notify.webhook", "after.exec", "publish.title", "log.level")
	if r := publish("b.ply", hook2); r.Title != "A b" {
		t.Errorf("b.ply published as %q; want the title the reload set, \"A b\"", r.Title)
	}
	waitFor(t, "a debug line (the webhook's delivery) after the reload to log.level debug", func() bool {
		return strings.Contains(d.log(), "webhook delivered")
	})

	reload(config(hook2.srv.URL, ""), "after.exec")
	publish("c.ply", hook2)

	// Commands run in order, one at a time: once d's has run, c's would
	// have run before it.
	reload(config(hook2.srv.URL, "B"), "after.exec")
	publish("d.ply", hook2)
	waitFor(t, "the command of d.ply", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "B d.ply")
	})
	if b, _ := os.ReadFile(log); string(b) != "A b.ply\nB d.ply\n" {
		t.Errorf("after.exec ran:\n%s\nwant A for b.ply (added by reload), nothing for c.ply (removed), B for d.ply", b)
	}
	if got := hook1.got(); !slices.Equal(got, []string{"a.ply"}) {
		t.Errorf("the first webhook got %v; want a.ply only (the reload moved the rest to the second)", got)
	}
	if got := hook2.got(); slices.Contains(got, "a.ply") || len(got) != 3 {
		t.Errorf("the second webhook got %v; want b, c and d", got)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

func needSh(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
}

// TestE2EReloadFollowSymlinks: follow_symlinks turned on by a reload, and a
// watch folder added by one with it on, apply to the jobs as they do to the
// watcher: a link that stays inside its folder, there before the reload or
// made after it, is published without a restart (the worker pool kept the
// folders of the start: the watcher handed the link over and its job failed
// as "a symbolic link").
func TestE2EReloadFollowSymlinks(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	base := readFile(t, e.cfgPath)
	link := func(dir, name string, size int) string {
		t.Helper()
		hidden := filepath.Join(dir, ".takes")
		if err := os.MkdirAll(hidden, 0o755); err != nil {
			t.Fatal(err)
		}
		writePLY(t, filepath.Join(hidden, name), size)
		l := filepath.Join(dir, name)
		if err := os.Symlink(filepath.Join(".takes", name), l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	reload := func(cfg string) {
		t.Helper()
		writeConfig(t, e.cfgPath, cfg)
		if code, out, errOut := runCLI(t, nil, "reload", "-config", e.cfgPath); code != 0 || !strings.Contains(out, "watch") {
			t.Fatalf("reload: exit %d, stdout %q, stderr %q; want watch applied", code, out, errOut)
		}
	}

	// A link inside the folder, not followed at start.
	a := link(e.inbox, "a.ply", 1100)
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	on := strings.Replace(base, "    recursive: true\n", "    recursive: true\n    follow_symlinks: true\n", 1)
	if on == base {
		t.Fatal("the test config has no watch entry to edit")
	}
	reload(on)
	for _, l := range []string{a, link(e.inbox, "b.ply", 1200)} {
		if r := waitReceipt(t, l, "done"); r.Splat.ID == "" {
			t.Errorf("%s (a link inside the folder, follow_symlinks on by reload): receipt %+v", l, r)
		}
	}

	extra := filepath.Join(e.dir, "extra")
	if err := os.MkdirAll(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	reload(strings.Replace(on, "watch:\n", fmt.Sprintf("watch:\n  - path: %s\n    follow_symlinks: true\n", extra), 1))
	if r := waitReceipt(t, link(extra, "c.ply", 1300), "done"); r.Splat.ID == "" {
		t.Errorf("c.ply (a link in a folder added by reload with follow_symlinks): receipt %+v", r)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("splatd exited %d", code)
	}
}

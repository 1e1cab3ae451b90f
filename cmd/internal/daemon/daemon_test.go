package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/configtest"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
)

// TestReadyzStoreRefusesWritesWhenIdle: an idle daemon (no file, no job)
// whose store refuses writes answers /readyz 503 naming the store, and is
// ready again once a write succeeds. The store's writes are made to fail
// through the probe's ping: the write the daemon makes on its own.
func TestReadyzStoreRefusesWritesWhenIdle(t *testing.T) {
	cfg := testConfig(t, "tok-"+strings.Repeat("r", 20), "metrics: {listen: \"127.0.0.1:0\"}\nrescan_interval: 0s\n")
	d, err := Open(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.apiGrace = time.Hour // its API (127.0.0.1:1) never answers: this test is the store's
	var failing atomic.Bool
	d.intake.probeEvery = 10 * time.Millisecond
	d.intake.ping = func() error {
		if failing.Load() {
			return errors.New("write splatd.db: no space left on device")
		}
		return d.store.Ping()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + d.metrics.Addr() + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReady := func(what string, want int, body string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, b := readyz()
			if code == want && strings.Contains(b, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz %d %q", what, code, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady("idle daemon", http.StatusOK, "")
	failing.Store(true)
	waitReady("store refusing writes", http.StatusServiceUnavailable, "no space left on device")
	failing.Store(false)
	waitReady("store accepting writes again", http.StatusOK, "")
}

// TestPeerReceipt: the pool's PeerReceipt reads a fleet peer's receipt
// beside the file: the outcome when it proves the job's content published
// here, ErrNoPeerReceipt while there is none (or one of other content), a
// plain error once the file is gone (no receipt will come), and no function
// at all when this daemon writes no receipts.
func TestPeerReceipt(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{API: config.API{Protocol: "v1", BaseURL: "https://api.example"}, After: config.After{Receipt: true}}
	read := peerReceipt(nil, cfg)
	file := filepath.Join(t.TempDir(), "scan.ply")
	if err := os.WriteFile(file, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := state.Job{File: state.File{Path: file, Size: 10, SHA256: "abc"}}
	if _, err := read(j); !errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Fatalf("no receipt yet: %v", err)
	}
	done := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := after.Receipt{Size: 10, SHA256: "abc", Status: "done", Protocol: "v1", API: "https://api.example",
		Splat: after.ReceiptSplat{ID: "s1", ViewerURL: "https://api.example/scene/s1", EditURL: "https://edit/s1"}, CompletedAt: &done}
	r.SHA256 = "old"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	if _, err := read(j); !errors.Is(err, uploader.ErrNoPeerReceipt) || !strings.Contains(err.Error(), "other content") {
		t.Fatalf("a receipt of older content: %v", err)
	}
	r.SHA256 = "abc"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	out, err := read(j)
	if err != nil || out.SplatID != "s1" || out.ViewerURL != "https://api.example/scene/s1" || out.EditURL != "https://edit/s1" || !out.CompletedAt.Equal(done) {
		t.Fatalf("peer's outcome %+v, %v", out, err)
	}
	// A link to another host than the API's viewer is not taken (a folder
	// writer chooses a receipt's contents).
	r.Splat.ViewerURL = "https://evil.example/scene/s1"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	if out, err := read(j); err != nil || out.ViewerURL != "" {
		t.Fatalf("a receipt's foreign viewer link: %+v, %v; want the outcome without the link", out, err)
	}
	// The peer deleted the file (on_success: delete) and left its receipt:
	// the outcome is still the receipt's. With the receipt gone too (and
	// this fleet moving nothing to a success_dir), none will come: the
	// wait ends.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if out, err := read(j); err != nil || out.SplatID != "s1" {
		t.Errorf("file deleted, receipt left: %+v, %v; want the receipt's outcome", out, err)
	}
	// A job that never read the file (no sha256) weighs the receipt by the
	// size it saw.
	unread := j
	unread.SHA256 = ""
	if out, err := read(unread); err != nil || out.SplatID != "s1" {
		t.Errorf("an unread job's file deleted, receipt left: %+v, %v; want the receipt's outcome", out, err)
	}
	unread.Size++
	if _, err := read(unread); err == nil {
		t.Error("an unread job of another size took the receipt")
	}
	if err := os.Remove(after.ReceiptPath(file)); err != nil {
		t.Fatal(err)
	}
	if _, err := read(j); err == nil || errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Errorf("file and receipt gone: %v, want an error that ends the wait", err)
	}
	if peerReceipt(nil, &config.Config{After: config.After{Receipt: false}}) != nil {
		t.Error("a daemon without receipts waits for its peers' receipts")
	}
}

// TestPeerReceiptMoved: with on_success: move, a peer takes the file and
// its receipt to success_dir; a job whose file is gone finds the receipt
// there (the watch entry's own after block says where), read, or never
// read, as beside the file. A daemon that keeps or deletes what it
// published does not look there: a file gone still ends the wait.
func TestPeerReceiptMoved(t *testing.T) {
	t.Parallel()
	root, dest := t.TempDir(), t.TempDir()
	move, dir := "move", dest
	cfg := &config.Config{API: config.API{Protocol: "v1", BaseURL: "https://api.example"},
		After: config.After{Receipt: true, OnSuccess: "keep"},
		Watch: []config.Watch{{Path: root, After: config.FolderAfter{OnSuccess: &move, SuccessDir: &dir}}}}
	file := filepath.Join(root, "rig", "scan.ply")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := state.Job{ID: 3, File: state.File{Path: file, Root: root, Size: 10, SHA256: "abc"}, Stage: state.Done,
		Publication: state.Publication{Protocol: state.ProtocolV1}, Splat: state.Splat{SplatID: "s1"}}
	peer := after.New(after.Options{OnSuccess: "move", SuccessDir: dest, Receipt: true, Protocol: "v1", API: "https://api.example"})
	movedRec, err := peer.Finish(context.Background(), j)
	moved := movedRec.File
	if err != nil || moved != filepath.Join(dest, "rig", "scan.ply") {
		t.Fatalf("the peer's move: %s, %v", moved, err)
	}
	read := peerReceipt(nil, cfg)
	for _, sha := range []string{"abc", ""} {
		mine := state.Job{ID: 9, File: state.File{Path: file, Root: root, Size: 10, SHA256: sha}}
		out, err := read(mine)
		if err != nil || out.SplatID != "s1" || out.Receipt != after.ReceiptPath(moved) {
			t.Errorf("sha256 %q, file moved by a peer: %+v, %v; want s1 from %s", sha, out, err, after.ReceiptPath(moved))
		}
	}
	if _, err := read(state.Job{File: state.File{Path: file, Root: root, Size: 10, SHA256: "other"}}); err == nil || errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Errorf("other content, file gone: %v, want an error that ends the wait", err)
	}
	cfg.Watch[0].After = config.FolderAfter{}
	if _, err := read(state.Job{File: state.File{Path: file, Root: root, Size: 10, SHA256: "abc"}}); err == nil || errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Errorf("on_success keep, file gone: %v, want an error that ends the wait", err)
	}
}

// TestAdoptedReceiptViewerHost: a receipt in a watch folder is the folder
// writer's text. Adopting it keeps its splat, but a viewer link to a host
// other than the API's is not stored, so no page or list shows it.
func TestAdoptedReceiptViewerHost(t *testing.T) {
	cfg := testConfig(t, "tok-viewer-0123456789", "")
	inbox := cfg.Watch[0].Path
	write := func(name, url string) {
		body := []byte("ply\n" + name)
		p := filepath.Join(inbox, name)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		r := after.Receipt{File: p, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Status: "done", Job: 1,
			Splat: after.ReceiptSplat{ID: "s-" + name, Hash: "h", URL: url, ViewerURL: url}}
		r.Protocol, r.API = cfg.API.Protocol, cfg.API.BaseURL
		if err := after.WriteReceipt(after.ReceiptPath(p), r); err != nil {
			t.Fatal(err)
		}
	}
	write("evil.ply", "https://phish.example/view?id=h")
	write("good.ply", "https://127.0.0.1:1/view?id=h")
	st, err := queue.Open(cfg.StateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := AdoptDir(context.Background(), st, cfg, inbox, false)
	if err != nil || len(rep.Adopted) != 2 {
		t.Fatalf("adopt: %v, %+v", err, rep)
	}
	want := map[string]string{"evil.ply": "", "good.ply": "https://127.0.0.1:1/view?id=h"}
	for _, a := range rep.Adopted {
		j, err := st.Get(a.Job)
		if err != nil {
			t.Fatal(err)
		}
		if name := filepath.Base(j.Path); j.ViewerURL != want[name] || a.URL != want[name] || j.SplatID != "s-"+name {
			t.Errorf("%s: stored link %q, reported %q, splat %q; want link %q", name, j.ViewerURL, a.URL, j.SplatID, want[name])
		}
	}
}

// BenchmarkReload measures one reload of a daemon that has been opened (not
// run): read and validate the file, diff it against the running config and
// apply watch, publish, after, log level and bandwidth. Each iteration
// alternates between two files that differ in all of them.
//
//	go test -run '^$' -bench Reload ./cmd/internal/daemon/
func BenchmarkReload(b *testing.B) {
	dir := b.TempDir()
	var paths [2]string
	for i := range paths {
		inbox := filepath.Join(dir, fmt.Sprintf("inbox%d", i))
		if err := os.MkdirAll(inbox, 0o755); err != nil {
			b.Fatal(err)
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("config%d.yaml", i))
		cfg := fmt.Sprintf("watch:\n  - path: %s\nstate_dir: %s\nmetrics: {listen: \"\"}\nlog: {level: %s}\n"+
			"upload: {bandwidth: %dMiB/s}\npublish: {title: \"t%d-{{.Stem}}\"}\nafter: {receipt: %v}\n",
			inbox, filepath.Join(dir, "state"), []string{"info", "debug"}[i], 10+i, i, i == 0)
		if err := os.WriteFile(paths[i], []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Load(paths[0], true)
	if err != nil {
		b.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SPLATD_TOKEN" {
			return "bench-token"
		}
		return ""
	}
	d, err := Open(cfg, Options{Getenv: getenv, Logger: zerolog.New(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	defer d.closeAll()
	n := 0
	for b.Loop() {
		n++
		d.o.ConfigPath = paths[n%2]
		if res := d.reload(); len(res.Errors) > 0 || len(res.Applied) != 5 {
			b.Fatalf("reload: %+v", res)
		}
	}
}

// testConfig writes (configtest.Write) and loads a config whose every part
// but extra is valid and local.
func testConfig(t *testing.T, token, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Load(configtest.Write(t, token, extra), true)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
)

// TestAdoptedReceiptViewerHost: a receipt in a watch folder is the folder
// writer's text. Adopting it keeps its splat, but a viewer link to a host
// other than the API's is not stored, so no page or list shows it.
func TestAdoptedReceiptViewerHost(t *testing.T) {
	cfgPath := startupConfig(t, "tok-viewer-0123456789", "")
	cfg, err := config.Load(cfgPath, true)
	if err != nil {
		t.Fatal(err)
	}
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
	rep, err := adoptDir(context.Background(), st, cfg, inbox, false)
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

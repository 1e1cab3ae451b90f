package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
)

func TestTrustedViewerURL(t *testing.T) {
	t.Parallel()
	public := &Config{API: APIConfig{BaseURL: "https://playcanvas.com"}}
	sim := &Config{API: APIConfig{BaseURL: "https://127.0.0.1:8443"}}
	own := &Config{API: APIConfig{BaseURL: "https://playcanvas.com", ViewerHosts: []string{"viewer.studio.example"}}}
	for _, tc := range []struct {
		cfg  *Config
		url  string
		keep bool
	}{
		{public, "https://superspl.at/scene/abc", true},
		{public, "https://playcanvas.com/view?id=abc", true},
		{public, "https://SUPERSPL.AT/view?id=abc", true},
		{public, "https://evil.example/view?id=abc", false},
		{public, "https://superspl.at.evil.example/x", false},
		{public, "https://superspl.at:8443/x", false},
		{public, "http://superspl.at/scene/abc", false},
		{public, "javascript:alert(1)", false},
		{public, "https://user@superspl.at/x", false},
		{sim, "https://127.0.0.1:8443/view?id=abc", true},
		{sim, "https://127.0.0.1:9999/view?id=abc", false},
		{own, "https://viewer.studio.example/v/1", true},
		{own, "https://superspl.at/scene/abc", false},
	} {
		got := tc.cfg.trustedViewerURL(tc.url)
		if (got != "") != tc.keep || (tc.keep && got != tc.url) {
			t.Errorf("base %s hosts %v: %q → %q, keep=%v", tc.cfg.API.BaseURL, tc.cfg.API.ViewerHosts, tc.url, got, tc.keep)
		}
	}
}

// TestAdoptedReceiptViewerHost: a receipt in a watch folder is the folder
// writer's text. Adopting it keeps its splat, but a viewer link to a host
// other than the API's is not stored, so no page or list shows it.
func TestAdoptedReceiptViewerHost(t *testing.T) {
	cfgPath := startupConfig(t, "tok-viewer-0123456789", "")
	cfg, err := loadConfig(cfgPath, true)
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

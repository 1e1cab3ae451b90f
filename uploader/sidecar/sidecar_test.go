package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

func TestResolveTemplateAndSidecar(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := filepath.Join(root, "site", "hall.ply")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmpl := state.PublishParams{
		Title: "{{.RelDir}}/{{.Stem}}", Format: "sog",
		Settings: map[string]any{"camera": map[string]any{"fov": 65, "target": []any{0, 0, 0}}},
	}
	r, err := Resolve(nil, tmpl, p, root, time.Now())
	if err != nil || r.Title != "site/hall" || r.Format != "sog" {
		t.Fatalf("ResolvePublish = %+v, %v", r, err)
	}

	sidecar := "title: Great Hall\nlisted: true\nformat: compressed.ply\nsettings:\n  camera:\n    fov: 40\n"
	if err := os.WriteFile(Path(p), []byte(sidecar), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = Resolve(nil, tmpl, p, root, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cam := r.Settings["camera"].(map[string]any)
	if r.Title != "Great Hall" || !r.Listed || r.Format != "compressed.ply" || cam["fov"] != 40 || cam["target"] == nil {
		t.Errorf("with sidecar = %+v (camera %v)", r, cam)
	}
	// The config's settings were not modified by the merge.
	if tmpl.Settings["camera"].(map[string]any)["fov"] != 65 {
		t.Error("merge changed the configured settings")
	}

	for _, bad := range []struct{ body, want string }{
		{"format: ply\n", "format: must be sog or compressed.ply"},
		{"titel: x\n", "titel: unknown key"},
		{"title: \"\"\n", "title: must not be empty"},
		{"encode: webp\n", "encode: must be sog or off"},
		{"listed: maybe\nsettings: 3\n", "listed: want true or false (line 1); settings: want a mapping (line 2)"},
		{"titel: oops\nformat: ply\n", "titel: unknown key (known: title, description, listed, format, settings, encode) (line 1); format: must be sog"},
	} {
		if err := os.WriteFile(Path(p), []byte(bad.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Resolve(nil, tmpl, p, root, time.Now())
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "hall.splat.yaml") {
			t.Errorf("sidecar %q: err = %v, want %q naming the sidecar", bad.body, err, bad.want)
		}
	}
}

// TestResolveEncode: publish.encode is laid over by the folder settings and
// then by the file's sidecar, where "off" turns it off.
func TestResolveEncode(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := filepath.Join(root, "site", "hall.ply")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	resolve := func(def string) string {
		t.Helper()
		r, err := Resolve(nil, state.PublishParams{Encode: def}, p, root, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return r.Encode
	}
	if got := resolve(""); got != "" {
		t.Fatalf("default: encode %q, want off", got)
	}
	if err := os.WriteFile(filepath.Join(root, FolderName), []byte("encode: sog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := resolve(""); got != "sog" {
		t.Fatalf("folder encode: sog: got %q", got)
	}
	if err := os.WriteFile(Path(p), []byte("encode: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := resolve("sog"); got != "" {
		t.Fatalf("sidecar encode: off: got %q", got)
	}
}

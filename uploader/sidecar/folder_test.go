package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFolderSettingsPrecedence: configured defaults < the root's
// .splat.yaml < a subfolder's < the file's own sidecar, key by key.
func TestFolderSettingsPrecedence(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	defaults := state.PublishParams{
		Title: "{{.Stem}}", Description: "from config", Format: "sog",
		Settings: map[string]any{"camera": map[string]any{"fov": 65, "target": []any{0, 0, 0}}},
	}
	writeFile(t, filepath.Join(root, FolderName), "title: \"Client A – {{.Stem}}\"\ndescription: client A\nsettings: {camera: {fov: 50}}\n")
	writeFile(t, filepath.Join(root, "rig2", FolderName), "listed: true\nsettings: {background: {color: [0, 0, 0]}}\n")
	deep := filepath.Join(root, "rig2", "day1", "hall.ply")
	writeFile(t, deep, "ply")
	top := filepath.Join(root, "lobby.ply")
	writeFile(t, top, "ply")
	// A folder file outside the root (above it) never applies.
	writeFile(t, filepath.Join(filepath.Dir(root), FolderName), "description: above the root\nlisted: true\n")

	tests := []struct {
		name, path, sidecar string
		want                state.PublishParams
		fov                 any
		background          bool
	}{
		{"root folder file", top, "", state.PublishParams{Title: "Client A – lobby", Description: "client A", Format: "sog"}, 50, false},
		{"subfolder adds to it", deep, "", state.PublishParams{Title: "Client A – hall", Description: "client A", Listed: true, Format: "sog"}, 50, true},
		{"sidecar wins", deep, "title: Great Hall\nlisted: false\nsettings: {camera: {fov: 30}}\n", state.PublishParams{Title: "Great Hall", Description: "client A", Format: "sog"}, 30, true},
	}
	for _, tt := range tests {
		if tt.sidecar != "" {
			writeFile(t, Path(tt.path), tt.sidecar)
		}
		got, err := Resolve(nil, defaults, tt.path, root, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		cam := got.Settings["camera"].(map[string]any)
		if got.Title != tt.want.Title || got.Description != tt.want.Description || got.Listed != tt.want.Listed ||
			got.Format != tt.want.Format || cam["fov"] != tt.fov || cam["target"] == nil || (got.Settings["background"] != nil) != tt.background {
			t.Errorf("%s: Resolve = %+v", tt.name, got)
		}
	}
	if defaults.Settings["camera"].(map[string]any)["fov"] != 65 || defaults.Title != "{{.Stem}}" {
		t.Error("resolving changed the configured defaults")
	}
}

// TestFolderSettingsErrorsNameTheFile: a bad folder file fails the files
// below it with a message naming that folder file, and a one-shot publish
// (no root) still reads the file's own folder.
func TestFolderSettingsErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := filepath.Join(root, "a", "scan.ply")
	writeFile(t, p, "ply")
	bad := filepath.Join(root, "a", FolderName)
	for _, tt := range []struct{ body, want string }{
		{"format: ply\n", "format: must be sog or compressed.ply"},
		{"title: \"{{.Stemm}}\"\n", "can't evaluate field Stemm"},
		{"titel: x\n", "titel: unknown key"},
	} {
		writeFile(t, bad, tt.body)
		_, err := Resolve(nil, state.PublishParams{Title: "{{.Stem}}"}, p, root, time.Now())
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), bad) {
			t.Errorf("folder file %q: err = %v, want %q naming %s", tt.body, err, tt.want, bad)
		}
	}
	writeFile(t, bad, "description: own folder\n")
	got, err := Resolve(nil, state.PublishParams{Title: "{{.Stem}}"}, p, "", time.Now())
	if err != nil || got.Description != "own folder" {
		t.Errorf("one-shot Resolve = %+v, %v; want the file's own folder settings", got, err)
	}
}

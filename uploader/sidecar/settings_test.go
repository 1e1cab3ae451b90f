package sidecar

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// nested is YAML for a value of n nested lists: [[...]].
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestTrustSettingsDepth: a sidecar or folder .splat.yaml whose settings
// nest 9998 levels (YAML takes up to 10000) fails its file with the reason;
// on main it resolved, and the job stored with it could not be read back
// (Go's JSON decoder stops at 10000 levels), which failed every claim,
// list and stats of the whole queue. What resolves must round-trip through
// the job record.
func TestTrustSettingsDepth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, body, want string
	}{
		{"sidecar, the reproduction", "d.splat.yaml", "settings:\n  a: " + nested(9998) + "\n", "sidecar d.splat.yaml: settings: nested more than 32 levels deep (line 2)"},
		{"folder settings", FolderName, "settings:\n  a: " + nested(9998) + "\n", FolderName + ": settings: nested more than 32 levels deep"},
		{"one past the bound", "d.splat.yaml", "settings:\n  a: " + nested(MaxSettingsDepth) + "\n", "settings: nested more than 32 levels deep"},
		{"through an alias", "d.splat.yaml", "settings: {x: &x " + nested(30) + ", b: [[*x]]}\n", "settings: nested more than 32 levels deep"},
		{"a key that is not text", "d.splat.yaml", "settings:\n  camera: {1: x}\n", "settings: keys must be text"},
		{"a value JSON cannot hold", "d.splat.yaml", "settings:\n  camera: {fov: .inf}\n", "settings: cannot be stored as JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			file := filepath.Join(root, "d.ply")
			writeFile(t, file, "ply")
			writeFile(t, filepath.Join(root, tc.file), tc.body)
			_, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resolve = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestSettingsWithinBound: settings as deep as the bound, and real viewer
// settings, resolve and round-trip through the job record.
func TestSettingsWithinBound(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "d.ply")
	writeFile(t, file, "ply")
	for _, body := range []string{
		// settings (1) › a (2) › 31 lists: 32 levels.
		"settings:\n  a: " + nested(MaxSettingsDepth-1) + "\n",
		"settings:\n  camera: {fov: 50, position: [1, 2, 3]}\n  animTracks:\n    - name: orbit\n      keyframes: {times: [0, 1], values: {position: [[0, 0, 0], [1, 1, 1]]}}\n",
	} {
		writeFile(t, Path(file), body)
		p, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		b, err := state.Job{ID: 1, Stage: state.Ready, Params: p}.Marshal()
		if err != nil {
			t.Fatalf("%q: marshal: %v", body, err)
		}
		if _, err := state.Unmarshal(b); err != nil {
			t.Fatalf("%q: the job record does not read back: %v", body, err)
		}
	}
}

// TestCheckSettings: the bound counts mappings and lists, the settings'
// own mapping as level 1.
func TestCheckSettings(t *testing.T) {
	t.Parallel()
	deep := func(n int) map[string]any { // n levels: the top mapping, then n-1 lists
		var v any = []any{}
		for i := 2; i < n; i++ {
			v = []any{v}
		}
		return map[string]any{"a": v}
	}
	for _, tc := range []struct {
		name string
		m    map[string]any
		ok   bool
	}{
		{"nil", nil, true},
		{"flat", map[string]any{"a": 1}, true},
		{"the bound", deep(MaxSettingsDepth), true},
		{"one past", deep(MaxSettingsDepth + 1), false},
		{"far past", deep(20000), false},
		{"map below the bound", map[string]any{"a": map[string]any{"b": map[string]any{}}}, true},
		{"non-text key", map[string]any{"a": map[any]any{1: "x"}}, false},
		{"NaN", map[string]any{"a": math.NaN()}, false},
	} {
		if err := CheckSettings(tc.m); (err == nil) != tc.ok {
			t.Errorf("%s: CheckSettings = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}

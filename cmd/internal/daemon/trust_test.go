package daemon

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/cmd/internal/config"
)

// TestReloadNamesTheWatchFoldersToTheFS: the daemon's one trust boundary
// (which the pool, the after-actions and its own reads share with the
// watcher) knows a watch folder a reload added, and keeps the old ones
// when a reload is refused.
func TestReloadNamesTheWatchFoldersToTheFS(t *testing.T) {
	dir := t.TempDir()
	outer := filepath.Join(dir, "share")
	inner := filepath.Join(outer, "client-a")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	write := func(watch ...string) {
		t.Helper()
		cfg := "watch:\n"
		for _, w := range watch {
			cfg += "  - path: " + w + "\n"
		}
		cfg += "state_dir: " + filepath.Join(dir, "state") + "\nmetrics: {listen: \"\"}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(outer)
	cfg, err := config.Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SPLATD_TOKEN" {
			return "test-token"
		}
		return ""
	}
	d, err := Open(cfg, Options{ConfigPath: path, Getenv: getenv, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.closeAll()
	if got := d.fs.Folders(); !slices.Equal(got, []string{outer}) {
		t.Fatalf("folders at start: %v, want %v", got, []string{outer})
	}
	write(outer, inner)
	if res := d.reload(); len(res.Errors) > 0 || !res.changed("watch") {
		t.Fatalf("reload: %+v", res)
	}
	if got := d.fs.Folders(); !slices.Contains(got, inner) || !slices.Contains(got, outer) {
		t.Fatalf("folders after the reload: %v, want %s and %s", got, outer, inner)
	}
	if err := os.WriteFile(path, []byte("watch: [{path: \"\"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := d.reload(); len(res.Errors) == 0 {
		t.Fatalf("an invalid config was applied: %+v", res)
	}
	if got := d.fs.Folders(); len(got) != 2 {
		t.Errorf("a refused reload changed the folders to %v", got)
	}
}

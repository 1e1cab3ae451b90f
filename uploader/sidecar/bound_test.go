package sidecar

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// aliasBomb is issue 36's sidecar: one anchored 60,000-character string and
// 480 aliases of it, 62 KB that decode to 29 MB.
func aliasBomb() string {
	return "settings:\n  a: &a " + strings.Repeat("x", 60000) + "\n  b: [" + strings.Repeat("*a, ", 479) + "*a]\n"
}

// TestAliasBombRefused: a sidecar or folder settings file whose value,
// aliases expanded, is over the small-file cap fails its file with a
// reason naming it, before the value is built: resolving it allocates
// little (on main it allocated the 29 MB, and the job stored them). Not
// parallel: it measures allocation.
func TestAliasBombRefused(t *testing.T) {
	bomb := aliasBomb()
	if len(bomb) > trustfs.SmallMax || len(bomb) < 60000 {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	for _, tc := range []struct{ file, want string }{
		{"d.splat.yaml", "sidecar d.splat.yaml: decodes to more than 65536 bytes"},
		{FolderName, "folder settings "},
	} {
		root := t.TempDir()
		file := filepath.Join(root, "d.ply")
		writeFile(t, file, "ply")
		writeFile(t, filepath.Join(root, tc.file), bomb)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "decodes to more than") {
			t.Fatalf("%s: Resolve = %v; want %q", tc.file, err, tc.want)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
			t.Errorf("%s: resolving allocated %d bytes, want under 4 MiB", tc.file, n)
		}
	}
}

// TestAliasesWithinCap: aliases whose expansion stays under the cap
// resolve as before; a cycle is refused, not walked for ever.
func TestAliasesWithinCap(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "d.ply")
	writeFile(t, file, "ply")
	writeFile(t, Path(file), "settings:\n  a: &p [1, 2, 3]\n  b: {position: *p, target: *p}\n")
	p, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Settings["b"]); got != "map[position:[1 2 3] target:[1 2 3]]" {
		t.Errorf("settings.b = %s", got)
	}
	writeFile(t, Path(file), "settings: &a {b: *a}\n")
	if _, err := Resolve(nil, state.PublishParams{}, file, root, time.Now()); err == nil {
		t.Error("an alias cycle resolved")
	}
}

// TestMergedSettingsCapped: each file within the cap, the settings a job
// would store once the folder's and the sidecar's are merged are over
// MaxSettingsBytes: the file fails, named, and nothing is stored.
func TestMergedSettingsCapped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "sub", "d.ply")
	writeFile(t, file, "ply")
	big := strings.Repeat("y", 40000)
	writeFile(t, filepath.Join(root, FolderName), "settings: {a: "+big+"}\n")
	writeFile(t, Path(file), "settings: {b: "+big+"}\n")
	_, err := Resolve(nil, state.PublishParams{}, file, root, time.Now())
	if err == nil || !strings.Contains(err.Error(), "settings of d.ply") || !strings.Contains(err.Error(), "more than 65536") {
		t.Fatalf("Resolve = %v; want the merged settings of d.ply refused", err)
	}
	writeFile(t, Path(file), "settings: {b: small}\n")
	if _, err := Resolve(nil, state.PublishParams{}, file, root, time.Now()); err != nil {
		t.Fatalf("within the cap: %v", err)
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// boundedEnv is an e2e world whose watch folder has max_size 1MiB.
func boundedEnv(t *testing.T) (*apisim.Server, *e2eEnv) {
	t.Helper()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "    recursive: true\n", "    recursive: true\n    max_size: 1MiB\n", 1)
	if cfg == string(b) {
		t.Fatal("the e2e config has no watch entry to bound")
	}
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return sim, e
}

// TestE2EPublishHeldToSizeBounds: `splatd publish` holds a file to the size
// bounds of the watch entry whose folder holds it, as the daemon does, with
// the daemon's words, before anything is hashed or uploaded, -force or not:
// a sparse PLY over max_size, and an unbundled SOG folder whose bundle would
// be over it (its meta.json alone is a few hundred bytes). The same PLY
// outside every watch folder is held to the default bound only, and is
// published.
func TestE2EPublishHeldToSizeBounds(t *testing.T) {
	t.Parallel()
	sim, e := boundedEnv(t)
	big := filepath.Join(e.inbox, "big.ply")
	size := writeBigPLY(t, big, 2<<20)
	room := filepath.Join(e.inbox, "room")
	if err := splatfile.WriteSparseSOGFolder(room, 100, 1<<20); err != nil {
		t.Fatal(err)
	}
	const bounds = "above the size bound max_size 1.0 MiB (1048576 bytes)"
	for _, force := range []bool{false, true} {
		args := []string{"publish", "-config", e.cfgPath}
		if force {
			args = append(args, "-force")
		}
		code, out, errOut := runCLI(t, nil, append(args, big, room)...)
		for _, want := range []string{
			fmt.Sprintf("%s is %s, %s: not hashed or uploaded", big, state.HumanSize(size), bounds),
			"the SOG folder's bundle would be ",
			bounds + ": not built or uploaded",
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("force %v: stderr lacks %q:\n%s", force, want, errOut)
			}
		}
		if code == 0 || out != "" {
			t.Errorf("force %v: exit %d, stdout %q; want a failure and no link", force, code, out)
		}
	}
	if splats, objects := sim.Splats(), sim.Objects(); len(splats) != 0 || len(objects) != 0 {
		t.Fatalf("%d splats, %d objects in storage after files outside the bounds; want none", len(splats), len(objects))
	}
	outside := filepath.Join(e.dir, "elsewhere", "big.ply")
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	writeBigPLY(t, outside, 2<<20)
	code, out, errOut := runCLI(t, nil, "publish", "-config", e.cfgPath, outside)
	if code != 0 || !strings.Contains(out, outside) {
		t.Errorf("publish of a file outside the watch folders: exit %d, stdout %q, stderr %q; want it published", code, out, errOut)
	}
	if n := len(sim.Splats()); n != 1 {
		t.Errorf("%d splats, want 1", n)
	}
}

// TestPublishReadsAFolderOnce: `splatd publish FOLDER` reads an unbundled
// SOG folder's images once, for the bundle it both weighs (the sha256 it
// looks up earlier publishes by) and uploads; -force, which looks nothing
// up, reads them as often. It once hashed the folder to look it up and
// read it again to build the bundle it sent. The reads are the process's
// own (/proc/self/io rchar: every byte read() returned, the simulator's
// too, in both runs alike), so the test is not parallel.
func TestPublishReadsAFolderOnce(t *testing.T) {
	if _, err := readChars(); err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	room := filepath.Join(e.inbox, "room")
	const imageSize = 4 << 20
	if err := splatfile.WriteSparseSOGFolder(room, 100, imageSize); err != nil {
		t.Fatal(err)
	}
	f, err := splatfile.CheckSOGFolder(filepath.Join(room, splatfile.SOGMeta))
	if err != nil {
		t.Fatal(err)
	}
	read := map[bool]int64{}
	for _, force := range []bool{false, true} {
		args := []string{"publish", "-config", e.cfgPath}
		if force {
			args = append(args, "-force")
		}
		var stdout, stderr strings.Builder
		c := &cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
		before, err := readChars()
		if err != nil {
			t.Fatal(err)
		}
		if code := dispatch(context.Background(), c, append(args, room)); code != exitOK {
			t.Fatalf("force %v: exit %d; stderr:\n%s", force, code, &stderr)
		}
		after, err := readChars()
		if err != nil {
			t.Fatal(err)
		}
		read[force] = after - before
	}
	if n := len(sim.Splats()); n != 2 {
		t.Fatalf("%d splats, want 2", n)
	}
	t.Logf("publish read %d bytes, publish -force %d", read[false], read[true])
	if extra := read[false] - read[true]; extra > f.Size/2 {
		t.Errorf("publish read %d bytes, publish -force %d: %d more, about one more read of the %d-byte bundle; want the folder read once", read[false], read[true], extra, f.Size)
	}
}

// readChars is the bytes this process has read so far (rchar).
func readChars() (int64, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/self/io has no rchar")
}

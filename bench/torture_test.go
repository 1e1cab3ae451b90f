package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTortureQuick is the quick variant of `make torture`, run by `make
// test`: every scenario with fewer files and kills, against a splatd binary
// built from this tree (with -race when the test itself runs with it, so the
// build reuses the test's compiled packages).
func TestTortureQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick torture takes about 30 s")
	}
	bin := filepath.Join(t.TempDir(), "splatd")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/splatd/splatd/cmd/splatd")...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("building splatd: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a bound against hangs, not a target (url-expiry may take 5 min)
	defer cancel()
	// hostile-folder runs in `make torture` only: its daemon runs under
	// ulimit -v, which a -race binary's shadow memory cannot live with.
	// power-cut too: it mounts FUSE file systems (root only).
	var only []string
	for _, name := range ScenarioNames() {
		if name != "hostile-folder" && name != "power-cut" {
			only = append(only, name)
		}
	}
	results := RunTorture(ctx, TortureOptions{Bin: bin, Dir: t.TempDir(), Quick: true, Log: testWriter{t}, Only: only})
	for _, r := range results {
		t.Log(r.Line())
		for _, n := range r.Notes {
			t.Logf("    %s", n)
		}
		if r.Skipped != "" {
			continue
		}
		if !r.OK() {
			t.Errorf("%s missed a target: %v", r.Scenario, r.Problems)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

package uploader

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/sidecar"
)

// TestPoolUsesTheDefaultsOfTheJobsRoot: a job remembers its watch root and
// is resolved with that root's publish defaults; other roots fall back to
// PoolOptions.Publish.
func TestPoolUsesTheDefaultsOfTheJobsRoot(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	clientA := filepath.Join(e.files, "clientA")
	a := e.writePLY("clientA/hall.ply", 3)
	b := e.writePLY("lobby.ply", 4)
	for _, c := range []struct{ path, root string }{{a, clientA}, {b, e.files}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.EnqueueBatch(context.Background(), []queue.Candidate{{Path: c.path, Root: c.root, Size: fi.Size(), ModTime: fi.ModTime()}}); err != nil {
			t.Fatal(err)
		}
	}
	o := e.options(1) // one worker: asked is appended without a lock
	defaults := o.Files.(SidecarFiles).Publish
	var asked []string
	o.Files = paramsFunc(func(path, root string, mod time.Time) (state.PublishParams, error) {
		asked = append(asked, root)
		defaults := defaults
		if root == clientA {
			defaults = state.PublishParams{Title: "Client A: {{.Stem}}", Format: "compressed.ply", Listed: true}
		}
		return sidecar.Resolve(nil, defaults, path, root, mod)
	})
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	got := map[string]state.PublishParams{}
	for _, j := range e.jobs() {
		if j.Stage != state.Done {
			t.Fatalf("job %s: %s (%s)", j.Path, j.Stage, j.FailReason)
		}
		got[j.Path] = j.Params
	}
	if p := got[a]; p.Title != "Client A: hall" || p.Format != "compressed.ply" || !p.Listed {
		t.Errorf("clientA job params = %+v", p)
	}
	if p := got[b]; p.Title != "lobby" || p.Format != "sog" || p.Listed {
		t.Errorf("other job params = %+v", p)
	}
	if len(asked) != 2 {
		t.Errorf("Params asked for %q, want once per job", asked)
	}
	e.checkOnce(a, b)
}

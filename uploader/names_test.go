package uploader

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestWorkerNamesAsBytes: a file is its name's bytes from the queue to its
// receipt. A name that is not UTF-8 is published and its receipt written
// beside it (it once failed with "file is gone": the stored name had lost
// its bytes), and a Latin-1 name beside a real U+FFFD name that differs only
// there are two files, each hashed as itself (the Latin-1 job once hashed
// the other file).
func TestWorkerNamesAsBytes(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	names := []string{
		e.writePLY("\xff\xfe.ply", 50),
		e.writePLY("caf\xe9.ply", 51),
		e.writePLY("caf\ufffd.ply", 52),
		e.writePLY("\u202egnp.ply", 53),
	}
	e.enqueue(names...)
	run := after.New(after.Options{Receipt: true})
	o := e.options(2)
	o.After = finishFunc(func(ctx context.Context, j state.Job) error {
		_, err := run.Finish(ctx, j)
		return err
	})
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkOnce(names...)
	jobs := e.jobs()
	if len(jobs) != len(names) {
		t.Fatalf("%d jobs for %d files", len(jobs), len(names))
	}
	byName := map[string]state.Job{}
	for _, j := range jobs {
		byName[j.Path] = j
	}
	for _, name := range names {
		j, ok := byName[name]
		if !ok {
			t.Errorf("no job named %q (jobs: %q)", name, keys(byName))
			continue
		}
		if j.Stage != state.Done || j.SHA256 != workerFileSHA(t, name) {
			t.Errorf("job of %q: %s, sha256 %s, want done with %s (%s)", name, j.Stage, j.SHA256, workerFileSHA(t, name), j.FailReason)
		}
		b, err := os.ReadFile(after.ReceiptPath(name))
		if err != nil {
			t.Errorf("receipt of %q: %v", name, err)
			continue
		}
		var r after.Receipt
		if err := json.Unmarshal(b, &r); err != nil || r.SHA256 != j.SHA256 || r.Status != "done" {
			t.Errorf("receipt of %q: %+v, %v", name, r, err)
		}
	}
}

func keys(m map[string]state.Job) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

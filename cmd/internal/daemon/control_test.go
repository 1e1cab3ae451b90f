package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/queue"
)

// TestFindJobNamesASOGFolder: an unbundled SOG folder's job is its
// meta.json's; an operator names it by the folder or by FOLDER.sog, the name
// it is published as, and both find it. A real file of that name keeps its
// own job, and a name that matches nothing says so.
func TestFindJobNamesASOGFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := queue.Open(filepath.Join(dir, "state"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	in := filepath.Join(dir, "in")
	meta := filepath.Join(in, "scan", "meta.json")
	bundle := filepath.Join(in, "other.sog")
	otherMeta := filepath.Join(in, "other", "meta.json")
	now := time.Now()
	var cs []queue.Candidate
	for i, p := range []string{meta, bundle, otherMeta} {
		cs = append(cs, queue.Candidate{Path: p, Root: in, Size: int64(100 + i), ModTime: now})
	}
	if _, err := st.EnqueueBatch(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{
		meta:                             meta,
		filepath.Join(in, "scan"):        meta,
		filepath.Join(in, "scan") + "/":  meta,
		filepath.Join(in, "scan.sog"):    meta,
		bundle:                           bundle, // a real FOLDER.sog is its own job
		filepath.Join(in, "other"):       otherMeta,
		filepath.Join(in, "missing.sog"): "",
		filepath.Join(in, "missing"):     "",
	} {
		j, err := FindJob(st, ref)
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), "no job for")):
			t.Errorf("FindJob(%s) = job %d %s, %v; want no job", ref, j.ID, j.Path, err)
		case want != "" && (err != nil || j.Path != want):
			t.Errorf("FindJob(%s) = %s, %v; want %s", ref, j.Path, err, want)
		}
	}
}

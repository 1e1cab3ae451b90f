package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
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

// TestShownViewerURL: the API's own viewer link is shown as it is, even on
// a host api.viewer_hosts does not name (a deployment whose viewer lives
// elsewhere lost every link before); a link from a receipt (adopted) only
// while it points to a viewer host.
func TestShownViewerURL(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{API: config.API{BaseURL: "https://api.example.com", ViewerHosts: []string{"viewer.example.com"}}}
	for _, tc := range []struct {
		url     string
		adopted bool
		want    string
	}{
		{"https://view.example.org/scene/a", false, "https://view.example.org/scene/a"},
		{"https://view.example.org/scene/a", true, ""},
		{"https://viewer.example.com/scene/a", true, "https://viewer.example.com/scene/a"},
	} {
		if got := shownViewerURL(cfg, tc.url, tc.adopted); got != tc.want {
			t.Errorf("shownViewerURL(%s, adopted %v) = %q, want %q", tc.url, tc.adopted, got, tc.want)
		}
	}
}

// TestPeerReceiptFollowsReload: whether a fleet daemon waits for a peer's
// receipt follows after.receipt as reloaded: off, it replays complete at
// once (errNoReceipts); on again, it looks for the receipt.
func TestPeerReceiptFollowsReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "a.ply")
	if err := os.WriteFile(file, []byte("ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := state.Job{File: state.File{Path: file, Root: dir, SHA256: strings.Repeat("0", 64), Size: 4}}
	d := &Daemon{}
	d.live.Store(&config.Config{After: config.After{Receipt: false}})
	if _, err := d.peerReceipt(j); !errors.Is(err, errNoReceipts) {
		t.Errorf("receipts off: %v, want errNoReceipts", err)
	}
	d.live.Store(&config.Config{After: config.After{Receipt: true}})
	if _, err := d.peerReceipt(j); !errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Errorf("receipts on, none yet: %v, want ErrNoPeerReceipt", err)
	}
}

// TestForgetUnreadableRecord: `splatd forget` removes a job whose stored
// record cannot be read (here nested past the JSON decoder's depth, as a
// sidecar's settings once made it), by id or by its file's path; the other
// controls say that forget is the way.
func TestForgetUnreadableRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	st, err := queue.Open(stateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "in", "a.ply"), filepath.Join(dir, "in", "b.ply")
	now := time.Now()
	if _, err := st.EnqueueBatch(context.Background(), []queue.Candidate{{Path: a, Size: 1, ModTime: now}, {Path: b, Size: 1, ModTime: now}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := bolt.Open(filepath.Join(stateDir, queue.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	deep := `{"v":1,"params":{"settings":{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}}}`
	err = db.Update(func(tx *bolt.Tx) error {
		for id := uint64(1); id <= 2; id++ {
			if err := tx.Bucket([]byte("jobs")).Put(binary.BigEndian.AppendUint64(nil, id), []byte(deep)); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, err = queue.Open(stateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	if _, err := Control(nil, st, ControlOps["cancel"], "1"); err == nil || !strings.Contains(err.Error(), "splatd forget 1") {
		t.Errorf("cancel of an unreadable job = %v; want an error advising splatd forget 1", err)
	}
	for ref, want := range map[string]string{"1": "job 1 forgotten: " + a, b: "job 2 forgotten: " + b} {
		j, err := Control(nil, st, ControlOps["forget"], ref)
		if err != nil || !strings.HasPrefix(ControlOps["forget"].Done(j), want) {
			t.Errorf("forget %s = %q, %v; want %q", ref, ControlOps["forget"].Done(j), err, want)
		}
	}
	if jobs, err := st.List(queue.Filter{}); err != nil || len(jobs) != 0 {
		t.Errorf("List after forget = %d jobs, %v", len(jobs), err)
	}
}

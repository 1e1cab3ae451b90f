package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/watcher/trustfs"
)

// TestAdoptFoundChunks: the intake records more receipts than one
// transaction takes (queue.AdoptChunk), each file adopted once, none queued.
func TestAdoptFoundChunks(t *testing.T) {
	cfg := testConfig(t, "tok-"+strings.Repeat("c", 20), "rescan_interval: 0s\n")
	d, err := Open(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	root := cfg.Watch[0].Path
	n := 2*queue.AdoptChunk + 3
	var batch []queue.Candidate
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("f%03d.ply", i))
		body := []byte("ply\n" + p)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		r := after.Receipt{File: p, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Status: "done", Job: uint64(i + 1),
			Splat: after.ReceiptSplat{ID: fmt.Sprint("s", i), Hash: "h"}}
		r.Protocol, r.API = cfg.API.Protocol, cfg.API.BaseURL
		if err := after.WriteReceipt(after.ReceiptPath(p), r); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, queue.Candidate{Path: p, Root: root, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	if rest := d.adoptFound(context.Background(), batch); len(rest) != 0 {
		t.Fatalf("%d of %d files left to queue, want none", len(rest), n)
	}
	st, err := d.store.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs != n {
		t.Fatalf("%d jobs after adopting %d receipts", st.Jobs, n)
	}
	for _, c := range batch {
		if j, err := d.store.JobByPath(c.Path); err != nil || !j.Adopted {
			t.Errorf("%s: %+v, %v; want an adopted job", c.Path, j.Publication, err)
		}
	}
	if again := d.adoptFound(context.Background(), batch); len(again) != 0 {
		t.Errorf("adopting again left %d to queue", len(again))
	}
	if st, _ := d.store.Stats(); st.Jobs != n {
		t.Errorf("%d jobs after adopting the same receipts again, want %d", st.Jobs, n)
	}
}

// TestCountReceiptsInChunks counts every receipt of a folder whose listing
// takes more than one chunk, and neither a folder named like one nor
// another file.
func TestCountReceiptsInChunks(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "shoot")
	if err := os.MkdirAll(filepath.Join(dir, "folder.splat.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := 2*receiptChunk + 3
	for i := range want {
		for _, name := range []string{fmt.Sprintf("take-%05d.ply", i), fmt.Sprintf("take-%05d.ply.splat.json", i)} {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fsys := new(trustfs.FS)
	fsys.SetFolders([]string{root})
	if got := countReceipts(fsys, dir); got != want {
		t.Errorf("countReceipts = %d, want %d", got, want)
	}
}

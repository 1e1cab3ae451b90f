package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
)

// TestPeerReceipt: the pool's PeerReceipt reads a fleet peer's receipt
// beside the file: the outcome when it proves the job's content published
// here, ErrNoPeerReceipt while there is none (or one of other content), a
// plain error once the file is gone (no receipt will come), and no function
// at all when this daemon writes no receipts.
func TestPeerReceipt(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{API: config.API{Protocol: "v1", BaseURL: "https://api.example"}, After: config.After{Receipt: true}}
	read := peerReceipt(cfg)
	file := filepath.Join(t.TempDir(), "scan.ply")
	if err := os.WriteFile(file, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := state.Job{Path: file, Size: 10, SHA256: "abc"}
	if _, err := read(j); !errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Fatalf("no receipt yet: %v", err)
	}
	done := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := after.Receipt{Size: 10, SHA256: "abc", Status: "done", Protocol: "v1", API: "https://api.example",
		Splat: after.ReceiptSplat{ID: "s1", ViewerURL: "https://api.example/scene/s1", EditURL: "https://edit/s1"}, CompletedAt: &done}
	r.SHA256 = "old"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	if _, err := read(j); !errors.Is(err, uploader.ErrNoPeerReceipt) || !strings.Contains(err.Error(), "other content") {
		t.Fatalf("a receipt of older content: %v", err)
	}
	r.SHA256 = "abc"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	out, err := read(j)
	if err != nil || out.SplatID != "s1" || out.ViewerURL != "https://api.example/scene/s1" || out.EditURL != "https://edit/s1" || !out.CompletedAt.Equal(done) {
		t.Fatalf("peer's outcome %+v, %v", out, err)
	}
	// A link to another host than the API's viewer is not taken (a folder
	// writer chooses a receipt's contents).
	r.Splat.ViewerURL = "https://evil.example/scene/s1"
	if err := after.WriteReceipt(after.ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
	if out, err := read(j); err != nil || out.ViewerURL != "" {
		t.Fatalf("a receipt's foreign viewer link: %+v, %v; want the outcome without the link", out, err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, err := read(j); err == nil || errors.Is(err, uploader.ErrNoPeerReceipt) {
		t.Errorf("file gone: %v, want an error that ends the wait", err)
	}
	if peerReceipt(&config.Config{After: config.After{Receipt: false}}) != nil {
		t.Error("a daemon without receipts waits for its peers' receipts")
	}
}

// TestJobsShowParked: `splatd jobs` shows a parked job's reason, in the
// table and in -json.
func TestJobsShowParked(t *testing.T) {
	t.Parallel()
	j := state.Job{ID: 7, Path: "/watch/a.ply", Stage: state.Signed, Parked: "another daemon is uploading this content's session (1 of 4 parts stored)",
		NextAttempt: time.Now().Add(time.Minute)}
	v := viewOf(j, nil)
	if v.Parked != j.Parked {
		t.Fatalf("view %+v", v)
	}
	var b bytes.Buffer
	printJobs(&b, []jobView{v}, time.Now())
	if !strings.Contains(b.String(), "PARKED: another daemon is uploading") {
		t.Errorf("jobs table:\n%s", b.String())
	}
}

package after

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/sidecar"
)

func afterTestJob(t *testing.T, root, rel string, stage state.Stage) state.Job {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("ply\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return state.Job{
		ID: 7, File: state.File{Path: p, Root: root, Size: 4, SHA256: "abc"}, Stage: stage,
		Params:  state.PublishParams{Title: "scan", Format: "sog"},
		Splat:   state.Splat{SplatID: "50", SplatHash: "h4sh", ViewerURL: "https://viewer.example/view?id=h4sh", PublishedAt: &now, CompletedAt: &now},
		Failure: state.Failure{FailReason: "invalid file: garbage"},
	}
}

func readReceipt(t *testing.T, path string) Receipt {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("receipt: %v", err)
	}
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("receipt %s: %v", path, err)
	}
	return r
}

func TestAfterKeepWritesReceipt(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	j := afterTestJob(t, root, "a/scan.ply", state.Done)
	fileRec, err := New(Options{Receipt: true}).Finish(context.Background(), j)
	file := fileRec.File
	if err != nil || file != j.Path {
		t.Fatalf("Finish = %q, %v", file, err)
	}
	r := readReceipt(t, ReceiptPath(j.Path))
	if r.Status != "done" || r.Splat.URL != j.ViewerURL || r.Splat.ID != "50" || r.SHA256 != "abc" || r.Title != "scan" || r.File != j.Path {
		t.Errorf("receipt = %+v", r)
	}
	// No temp files left beside it.
	ents, _ := os.ReadDir(filepath.Dir(j.Path))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("leftover temp file %s", e.Name())
		}
	}
}

// TestReceiptRecordsEncodedUpload: a job that uploaded a SOG encoded from
// its PLY keeps the source's sha256 and size in the receipt and names the
// uploaded encoding, size and sha256; its source_format is the file's.
func TestReceiptRecordsEncodedUpload(t *testing.T) {
	t.Parallel()
	j := afterTestJob(t, t.TempDir(), "scan.ply", state.Done)
	j.Kind, j.Protocol = "ply", state.ProtocolV1
	j.Encoded = &state.Encoded{Encoding: "sog", Path: "/var/lib/splatd/encoded/abc.sog", Size: 3, SHA256: "def"}
	if _, err := New(Options{Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	r := readReceipt(t, ReceiptPath(j.Path))
	if r.SHA256 != "abc" || r.Size != 4 || r.SourceFormat != "ply" || r.Format != "" || r.Uploaded == nil ||
		*r.Uploaded != (ReceiptUpload{Encoding: "sog", Size: 3, SHA256: "def"}) {
		t.Errorf("receipt = %+v (uploaded %+v)", r, r.Uploaded)
	}
	j.Encoded = nil
	j.Path = filepath.Join(filepath.Dir(j.Path), "plain.ply")
	os.WriteFile(j.Path, []byte("ply\n"), 0o644)
	if _, err := New(Options{Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if r := readReceipt(t, ReceiptPath(j.Path)); r.Uploaded != nil || r.SourceFormat != "ply" || r.Format != "" {
		t.Errorf("receipt of an unencoded upload: %+v", r)
	}
}

// TestReceiptFormatsHaveOneMeaning: a receipt names the file's format as
// source_format and the splat's as output_format under both protocols;
// the older format key is written under legacy only, where it always was
// the output format (under v1 it was the source format). An old receipt's
// format is read back as the publish format only when it was legacy's.
func TestReceiptFormatsHaveOneMeaning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	legacy := afterTestJob(t, dir, "a.ply", state.Done)
	legacy.Kind, legacy.Params.Format = "ply", "compressed.ply"
	v1 := afterTestJob(t, dir, "b.ply", state.Done)
	v1.Kind, v1.Protocol, v1.V1 = "ply", state.ProtocolV1, &state.Session{Output: "sog"}
	for _, tc := range []struct {
		j                   state.Job
		source, output, old string
	}{
		{legacy, "ply", "compressed.ply", "compressed.ply"},
		{v1, "ply", "sog", ""},
	} {
		if _, err := New(Options{Receipt: true}).Finish(context.Background(), tc.j); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(ReceiptPath(tc.j.Path))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		old, has := m["format"]
		if m["source_format"] != tc.source || m["output_format"] != tc.output || (tc.old == "") == has || (has && old != tc.old) {
			t.Errorf("%s receipt: source_format %v, output_format %v, format %v (%v); want %s, %s, %q", protocol(tc.j), m["source_format"], m["output_format"], old, has, tc.source, tc.output, tc.old)
		}
	}
	for _, tc := range []struct {
		r    Receipt
		want string
	}{
		{Receipt{Protocol: "legacy", Format: "compressed.ply"}, "compressed.ply"},
		{Receipt{Format: "sog"}, "sog"},
		{Receipt{Protocol: "v1", Format: "ply"}, ""},
		{Receipt{Protocol: "legacy", OutputFormat: "sog", Format: "sog"}, "sog"},
	} {
		if got := tc.r.PublishFormat(); got != tc.want {
			t.Errorf("PublishFormat of %+v = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestAfterMoveKeepsRelativePathAndNeverOverwrites(t *testing.T) {
	t.Parallel()
	root, done := t.TempDir(), t.TempDir()
	a := New(Options{OnSuccess: "move", SuccessDir: done, Receipt: true})

	j := afterTestJob(t, root, "day1/scan.ply", state.Done)
	if err := os.WriteFile(sidecar.Path(j.Path), []byte("title: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fileRec, err := a.Finish(context.Background(), j)
	file := fileRec.File
	want := filepath.Join(done, "day1", "scan.ply")
	if err != nil || file != want {
		t.Fatalf("Finish = %q, %v; want %q", file, err, want)
	}
	if _, err := os.Stat(j.Path); !os.IsNotExist(err) {
		t.Errorf("source still there: %v", err)
	}
	if _, err := os.Stat(sidecar.Path(want)); err != nil {
		t.Errorf("sidecar did not travel with the file: %v", err)
	}
	if r := readReceipt(t, ReceiptPath(want)); r.File != want {
		t.Errorf("receipt file = %q, want %q", r.File, want)
	}

	// Finish again (a crash before MarkFinalized): finds the moved file.
	if again, err := a.Finish(context.Background(), j); err != nil || again.File != want {
		t.Errorf("second Finish = %q, %v", again.File, err)
	}

	// A second file with the same relative name gets a new name.
	j2 := afterTestJob(t, root, "day1/scan.ply", state.Done)
	file2Rec, err := a.Finish(context.Background(), j2)
	file2 := file2Rec.File
	if err != nil || file2 != filepath.Join(done, "day1", "scan.1.ply") {
		t.Fatalf("Finish = %q, %v", file2, err)
	}
}

func TestAfterDeleteKeepsReceipt(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	j := afterTestJob(t, root, "scan.ply", state.Done)
	fileRec, err := New(Options{OnSuccess: "delete", Receipt: true}).Finish(context.Background(), j)
	file := fileRec.File
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(j.Path); !os.IsNotExist(err) {
		t.Errorf("file not deleted")
	}
	if r := readReceipt(t, ReceiptPath(file)); r.Status != "done" {
		t.Errorf("receipt = %+v", r)
	}
}

func TestAfterFailureMoveAndReason(t *testing.T) {
	t.Parallel()
	root, failed := t.TempDir(), t.TempDir()
	j := afterTestJob(t, root, "bad.ply", state.Failed)
	j.SplatID, j.ViewerURL = "", ""
	rec, err := New(Options{OnSuccess: "move", SuccessDir: t.TempDir(), OnFailure: "move", FailureDir: failed, Receipt: true}).
		Finish(context.Background(), j)
	file := rec.File
	if err != nil || file != filepath.Join(failed, "bad.ply") {
		t.Fatalf("Finish = %q, %v", file, err)
	}
	r := readReceipt(t, ReceiptPath(file))
	if r.Status != "failed" || r.Message != "invalid file: garbage" {
		t.Errorf("receipt = %+v", r)
	}
}

func TestAfterDuplicateNamesOriginal(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	orig := afterTestJob(t, root, "first.ply", state.Done)
	orig.ID = 1
	dup := afterTestJob(t, root, "copy.ply", state.Done)
	dup.ID, dup.DuplicateOf, dup.SplatID, dup.ViewerURL = 2, 1, "", ""
	a := New(Options{Receipt: true, Lookup: func(id uint64) (state.Job, error) {
		if id != 1 {
			t.Errorf("lookup of %d", id)
		}
		return orig, nil
	}})
	if _, err := a.Finish(context.Background(), dup); err != nil {
		t.Fatal(err)
	}
	r := readReceipt(t, ReceiptPath(dup.Path))
	if r.Status != "duplicate" || r.Splat.URL != orig.ViewerURL || r.DuplicateOf != 1 || !strings.Contains(r.Message, orig.Path) {
		t.Errorf("receipt = %+v", r)
	}
}

func TestAfterNoReceiptForVanishedFailedFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	j := afterTestJob(t, root, "renamed-away.ply", state.Failed)
	if err := os.Remove(j.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Receipt: true, OnFailure: "move", FailureDir: t.TempDir()}).Finish(context.Background(), j); err != nil {
		t.Fatalf("Finish of a failed job whose file is gone: %v", err)
	}
	if _, err := os.Stat(ReceiptPath(j.Path)); !os.IsNotExist(err) {
		t.Errorf("receipt written beside a file that is gone: %v", err)
	}
}

// TestAfterFailureMoveFinishedAfterCrash: Finish runs again after a crash
// that came between the move and the receipt; the receipt is written at the
// moved file, not skipped because the original path is empty.
func TestAfterFailureMoveFinishedAfterCrash(t *testing.T) {
	t.Parallel()
	root, failed := t.TempDir(), t.TempDir()
	j := afterTestJob(t, root, "bad.ply", state.Failed)
	target := filepath.Join(failed, "bad.ply")
	if err := os.Rename(j.Path, target); err != nil { // the move happened, the receipt did not
		t.Fatal(err)
	}
	fileRec, err := New(Options{Receipt: true, OnFailure: "move", FailureDir: failed}).Finish(context.Background(), j)
	file := fileRec.File
	if err != nil || file != target {
		t.Fatalf("Finish = %q, %v; want %q", file, err, target)
	}
	if r := readReceipt(t, ReceiptPath(target)); r.Status != "failed" {
		t.Errorf("receipt = %+v", r)
	}
}

func TestRunnersChooseTheJobsRoot(t *testing.T) {
	t.Parallel()
	rootA, rootB, doneA := t.TempDir(), t.TempDir(), t.TempDir()
	rs := Runners{
		Default: New(Options{Receipt: true}),
		Roots:   map[string]*Runner{rootA: New(Options{OnSuccess: "move", SuccessDir: doneA, Receipt: false})},
	}
	a := afterTestJob(t, rootA, "x/scan.ply", state.Done)
	b := afterTestJob(t, rootB, "x/scan.ply", state.Done)
	fileARec, err := rs.Finish(context.Background(), a)
	fileA := fileARec.File
	if want := filepath.Join(doneA, "x", "scan.ply"); err != nil || fileA != want {
		t.Fatalf("root A: Finish = %q, %v; want moved to %s", fileA, err, want)
	}
	if existsIn(nil, "", ReceiptPath(fileA)) {
		t.Error("root A turned receipts off, but one was written")
	}
	fileBRec, err := rs.Finish(context.Background(), b)
	fileB := fileBRec.File
	if err != nil || fileB != b.Path || !existsIn(nil, "", ReceiptPath(b.Path)) {
		t.Fatalf("root B: Finish = %q, %v; want kept with a receipt", fileB, err)
	}
	if r := rs.For(rootB).Receipt(b); r.Status != "done" || r.File != b.Path || r.Splat.URL != b.ViewerURL {
		t.Errorf("Receipt = %+v", r)
	}
}

// TestRemoveOwnReceipt: only the receipt a job wrote for its content goes;
// one of another job, of other content, or none at all stays as it is.
func TestRemoveOwnReceipt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "a.ply")
	sha := strings.Repeat("a", 64)
	write := func(job uint64, sum string) {
		t.Helper()
		if err := WriteReceipt(ReceiptPath(file), Receipt{File: file, SHA256: sum, Status: "done", Job: job}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := RemoveOwnReceipt(nil, dir, file, 7, sha); ok || err != nil {
		t.Errorf("no receipt: %v, %v; want false, nil", ok, err)
	}
	for _, other := range []struct {
		job uint64
		sum string
	}{{8, sha}, {7, strings.Repeat("b", 64)}} {
		write(other.job, other.sum)
		if ok, err := RemoveOwnReceipt(nil, dir, file, 7, sha); ok || err != nil {
			t.Errorf("receipt of job %d, sha %.8s: removed %v, %v; want it kept", other.job, other.sum, ok, err)
		}
	}
	write(7, sha)
	if ok, err := RemoveOwnReceipt(nil, dir, file, 7, sha); !ok || err != nil {
		t.Errorf("the job's own receipt: %v, %v; want removed", ok, err)
	}
	if _, err := os.Lstat(ReceiptPath(file)); !os.IsNotExist(err) {
		t.Errorf("the receipt is still there: %v", err)
	}
}

package after

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// fakeLedger is a job store that knows the paths in known and records
// what it adopts.
type fakeLedger struct {
	known   map[string]bool
	adopted []queue.Adoption
}

func (l *fakeLedger) Known(path string, _ int64, _ time.Time) bool { return l.known[path] }

func (l *fakeLedger) AdoptBatch(_ context.Context, as []queue.Adoption) ([]state.Job, error) {
	l.adopted = append(l.adopted, as...)
	jobs := make([]state.Job, len(as))
	for i, a := range as {
		jobs[i] = state.Job{ID: uint64(len(l.adopted) - len(as) + i + 1), File: state.File{Path: a.Path}, Splat: state.Splat{SplatID: a.SplatID, ViewerURL: a.URL}}
	}
	return jobs, nil
}

// writePublished writes file with content and a receipt beside it that says
// done for sha256 sum (the content's, unless sum is set).
func writePublished(t *testing.T, file, content, sum, url string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum == "" {
		h := sha256.Sum256([]byte(content))
		sum = hex.EncodeToString(h[:])
	}
	r := Receipt{File: file, Size: int64(len(content)), SHA256: sum, Status: "done", Protocol: "v1", Splat: ReceiptSplat{ID: "s-" + filepath.Base(file), URL: url}}
	if err := WriteReceipt(ReceiptPath(file), r); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptDir: a folder's receipts that prove their file published are
// adopted (from the innermost watch root, with only a trusted viewer link);
// a receipt of other content is reported, one of a file that is gone is
// passed over, a file the state knows is counted; a dry run records
// nothing.
func TestAdoptDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inner := filepath.Join(dir, "client")
	good := filepath.Join(inner, "hall.ply")
	writePublished(t, good, "hall", "", "https://viewer.example/view?id=h")
	changed := filepath.Join(dir, "lobby.ply")
	writePublished(t, changed, "lobby", strings.Repeat("0", 64), "")
	known := filepath.Join(dir, "known.ply")
	writePublished(t, known, "known", "", "")
	gone := filepath.Join(dir, "gone.ply")
	writePublished(t, gone, "gone", "", "")
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	trusted := func(u string) string {
		if strings.HasPrefix(u, "https://viewer.example/") {
			return u
		}
		return ""
	}
	o := AdoptOptions{Service: Service{Protocol: "v1"}, Roots: []string{dir, inner}, ViewerURL: trusted, DryRun: true}

	l := &fakeLedger{known: map[string]bool{known: true}}
	rep, err := AdoptDir(context.Background(), l, dir, o)
	if err != nil || len(l.adopted) != 0 || len(rep.Adopted) != 1 || rep.Adopted[0].File != good || rep.Adopted[0].Job != 0 {
		t.Fatalf("dry run: %+v, %v, %d recorded; want hall.ply found and nothing recorded", rep, err, len(l.adopted))
	}

	o.DryRun = false
	rep, err = AdoptDir(context.Background(), l, dir, o)
	if err != nil || len(rep.Adopted) != 1 || rep.Adopted[0].Job == 0 || rep.Known != 1 {
		t.Fatalf("adopt: %+v, %v; want hall.ply adopted as a job, known.ply known", rep, err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].File != changed || !strings.Contains(rep.Skipped[0].Why, "sha256") {
		t.Errorf("skipped %+v, want lobby.ply for its sha256", rep.Skipped)
	}
	a := l.adopted[0]
	if a.Root != inner || a.URL != "https://viewer.example/view?id=h" || a.SplatID != "s-hall.ply" || a.Receipt != ReceiptPath(good) || a.SHA256 == "" {
		t.Errorf("adoption %+v; want root %s, the trusted link, the receipt's splat", a, inner)
	}

	for _, bad := range []string{"", filepath.Join(dir, "none"), good} {
		if _, err := AdoptDir(context.Background(), l, bad, o); err == nil {
			t.Errorf("AdoptDir(%q) = nil error, want one", bad)
		}
	}
}

// TestAdoptionOfKeepsOnlyTrustedLinks: a receipt's viewer link is the
// folder writer's text; without a filter none is kept.
func TestAdoptionOfKeepsOnlyTrustedLinks(t *testing.T) {
	t.Parallel()
	ev := Evidence{File: "/w/a.ply", Receipt: Receipt{Splat: ReceiptSplat{ID: "s", URL: "https://evil.example/x"}}, Done: true}
	if a := AdoptionOf(ev, "/w", nil); a.URL != "" || a.SplatID != "s" || a.Root != "/w" {
		t.Errorf("AdoptionOf without a filter = %+v, want no link", a)
	}
	if a := AdoptionOf(ev, "/w", func(string) string { return "" }); a.URL != "" {
		t.Errorf("AdoptionOf with a refusing filter kept %q", a.URL)
	}
}

package after

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Adoption turns receipts into jobs: a file whose receipt proves it
// published (CheckIn) is recorded as a done job rather than queued, so a
// new or lost state directory never publishes it again. The daemon adopts
// what its watcher finds (one file at a time, AdoptionOf); `splatd adopt`
// walks a folder (AdoptDir).

// Ledger is what adoption needs of the job store.
type Ledger interface {
	// Known reports whether the state knows path with this size and mtime.
	Known(path string, size int64, mtime time.Time) bool
	// AdoptBatch records adoptions as done jobs (ID 0: none was made);
	// on an error it returns the jobs of those it recorded before it.
	AdoptBatch(ctx context.Context, as []queue.Adoption) ([]state.Job, error)
}

var _ Ledger = (*queue.Store)(nil)

// AdoptionOf is the adopted job of a receipt's evidence, from watch root
// root. The receipt is the folder writer's text: its viewer link is kept
// only as far as viewerURL keeps it (the daemon keeps links to the API's
// viewer host; nil keeps none).
func AdoptionOf(ev Evidence, root string, viewerURL func(string) string) queue.Adoption {
	r := ev.Receipt
	url := ""
	if viewerURL != nil {
		url = viewerURL(r.Splat.URL)
	}
	return queue.Adoption{
		Path: ev.File, Root: root, Size: ev.Size, ModTime: ev.ModTime, SHA256: ev.SHA256,
		SplatID: r.Splat.ID, SplatHash: r.Splat.Hash, URL: url, Title: r.Title, Format: r.PublishFormat(),
		PublishedAt: r.PublishedAt, CompletedAt: r.CompletedAt, Receipt: ReceiptPath(ev.File),
	}
}

// AdoptOptions says how AdoptDir weighs and records receipts.
type AdoptOptions struct {
	// Service is the protocol and service a receipt must name, when it
	// names one, to count.
	Service Service
	// Roots are the watch folders: an adopted file's root is the innermost
	// one holding it (its after-action's relative path is taken from it),
	// else the folder walked.
	Roots []string
	// ViewerURL filters a receipt's viewer link (AdoptionOf).
	ViewerURL func(string) string
	// DryRun finds what would be adopted and records nothing.
	DryRun bool
	// FS is the trust boundary the receipts and files are read through.
	FS *trustfs.FS
}

// AdoptReport is what AdoptDir did (or would do, with DryRun): the JSON of
// `splatd adopt -json` and of the admin socket's /v1/adopt.
type AdoptReport struct {
	DryRun  bool          `json:"dry_run"`
	Adopted []AdoptedFile `json:"adopted"`
	Known   int           `json:"known"` // already in the state
	Skipped []SkippedFile `json:"skipped"`
}

// AdoptedFile is one file adopted as done.
type AdoptedFile struct {
	File  string `json:"file"`
	Job   uint64 `json:"job,omitempty"` // 0 with DryRun
	Splat string `json:"splat,omitempty"`
	URL   string `json:"url,omitempty"`
}

// SkippedFile is one receipt that is not evidence, and why.
type SkippedFile struct {
	File string `json:"file"`
	Why  string `json:"why"`
}

// AdoptDir walks dir for receipts and records every file whose receipt
// proves it published (CheckIn) as an adopted done job in st, unless st
// knows it already. Receipts of files that are gone (deleted or moved after
// publishing) are passed over silently.
func AdoptDir(ctx context.Context, st Ledger, dir string, o AdoptOptions) (AdoptReport, error) {
	rep := AdoptReport{DryRun: o.DryRun, Adopted: []AdoptedFile{}, Skipped: []SkippedFile{}}
	if dir == "" {
		return rep, errors.New("adopt: no folder given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return rep, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return rep, fmt.Errorf("adopt: %w", err)
	} else if !fi.IsDir() {
		return rep, fmt.Errorf("adopt: %s is not a folder", abs)
	}
	found, err := findAdoptions(ctx, st, abs, o, &rep)
	if err != nil {
		return rep, err
	}
	if o.DryRun {
		for _, a := range found {
			rep.Adopted = append(rep.Adopted, AdoptedFile{File: a.Path, Splat: a.SplatID, URL: a.URL})
		}
		return rep, nil
	}
	if len(found) == 0 {
		return rep, nil
	}
	jobs, err := st.AdoptBatch(ctx, found)
	for _, j := range jobs {
		if j.ID == 0 {
			rep.Known++
			continue
		}
		rep.Adopted = append(rep.Adopted, AdoptedFile{File: j.Path, Job: j.ID, Splat: j.SplatID, URL: j.ViewerURL})
	}
	return rep, err
}

// findAdoptions walks abs and returns the adoptions its receipts prove,
// counting the known files and listing the receipts that are no evidence
// in rep.
func findAdoptions(ctx context.Context, st Ledger, abs string, o AdoptOptions, rep *AdoptReport) ([]queue.Adoption, error) {
	var found []queue.Adoption
	err := filepath.WalkDir(abs, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			rep.Skipped = append(rep.Skipped, SkippedFile{File: p, Why: err.Error()})
			if de != nil && de.IsDir() && p != abs {
				return fs.SkipDir
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if de.IsDir() || !strings.HasSuffix(p, ReceiptSuffix) {
			return nil
		}
		file := strings.TrimSuffix(p, ReceiptSuffix)
		fi, err := o.FS.Lstat(abs, file)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && st.Known(file, fi.Size(), fi.ModTime()) {
			rep.Known++
			return nil
		}
		ev, err := CheckIn(ctx, o.FS, abs, file, o.Service)
		switch {
		case err != nil:
			rep.Skipped = append(rep.Skipped, SkippedFile{File: file, Why: err.Error()})
		case !ev.Done:
			rep.Skipped = append(rep.Skipped, SkippedFile{File: file, Why: ev.Why})
		default:
			found = append(found, AdoptionOf(ev, rootOf(o.Roots, file, abs), o.ViewerURL))
		}
		return nil
	})
	return found, err
}

// rootOf is the innermost of roots holding file, else fallback.
func rootOf(roots []string, file, fallback string) string {
	best := ""
	for _, r := range roots {
		if _, in := trustfs.Within(r, file); in && len(r) > len(best) {
			best = r
		}
	}
	if best == "" {
		return fallback
	}
	return best
}

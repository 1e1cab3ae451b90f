package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/watcher/trustfs"
)

// AdoptReport is what `splatd adopt` did (or would do, with -dry-run).
type AdoptReport struct {
	DryRun  bool          `json:"dry_run"`
	Adopted []AdoptedFile `json:"adopted"`
	Known   int           `json:"known"` // already in the state
	Skipped []SkippedFile `json:"skipped"`
}

type AdoptedFile struct {
	File  string `json:"file"`
	Job   uint64 `json:"job,omitempty"` // 0 with -dry-run
	Splat string `json:"splat,omitempty"`
	URL   string `json:"url,omitempty"`
}

type SkippedFile struct {
	File string `json:"file"`
	Why  string `json:"why"`
}

// AdoptDir walks dir for receipts and records every file whose receipt
// proves it published (after.Check) as an adopted done job, unless the
// state knows it already. Receipts of files that are gone (deleted or moved
// after publishing) are passed over silently.
func AdoptDir(ctx context.Context, st *queue.Store, cfg *config.Config, dir string, dryRun bool) (AdoptReport, error) {
	rep := AdoptReport{DryRun: dryRun, Adopted: []AdoptedFile{}, Skipped: []SkippedFile{}}
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
	svc := cfg.ReceiptService()
	var found []queue.Adoption
	err = filepath.WalkDir(abs, func(p string, de fs.DirEntry, err error) error {
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
		if de.IsDir() || !strings.HasSuffix(p, ".splat.json") {
			return nil
		}
		file := strings.TrimSuffix(p, ".splat.json")
		fi, err := trustfs.Lstat(abs, file)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && st.Known(file, fi.Size(), fi.ModTime()) {
			rep.Known++
			return nil
		}
		ev, err := after.CheckIn(ctx, abs, file, svc)
		switch {
		case err != nil:
			rep.Skipped = append(rep.Skipped, SkippedFile{File: file, Why: err.Error()})
		case !ev.Done:
			rep.Skipped = append(rep.Skipped, SkippedFile{File: file, Why: ev.Why})
		default:
			found = append(found, adoptionOf(cfg, ev, watchRootOf(cfg, file, abs)))
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	if dryRun {
		for _, a := range found {
			rep.Adopted = append(rep.Adopted, AdoptedFile{File: a.Path, Splat: a.SplatID, URL: a.URL})
		}
		return rep, nil
	}
	if len(found) == 0 {
		return rep, nil
	}
	jobs, err := st.AdoptBatch(ctx, found)
	if err != nil {
		return rep, err
	}
	for _, j := range jobs {
		if j.ID == 0 {
			rep.Known++
			continue
		}
		rep.Adopted = append(rep.Adopted, AdoptedFile{File: j.Path, Job: j.ID, Splat: j.SplatID, URL: j.ViewerURL})
	}
	return rep, nil
}

// watchRootOf is the watch root holding file (the after-action's relative
// path is taken from it), else fallback.
func watchRootOf(cfg *config.Config, file, fallback string) string {
	best := ""
	for _, w := range cfg.Watch {
		if rel, err := filepath.Rel(w.Path, file); err == nil && !strings.HasPrefix(rel, "..") && len(w.Path) > len(best) {
			best = w.Path
		}
	}
	if best == "" {
		return fallback
	}
	return best
}

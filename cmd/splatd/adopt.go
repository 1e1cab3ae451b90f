package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/watcher/trustfs"
)

// adoptReport is what `splatd adopt` did (or would do, with -dry-run).
type adoptReport struct {
	DryRun  bool          `json:"dry_run"`
	Adopted []adoptedFile `json:"adopted"`
	Known   int           `json:"known"` // already in the state
	Skipped []skippedFile `json:"skipped"`
}

type adoptedFile struct {
	File  string `json:"file"`
	Job   uint64 `json:"job,omitempty"` // 0 with -dry-run
	Splat string `json:"splat,omitempty"`
	URL   string `json:"url,omitempty"`
}

type skippedFile struct {
	File string `json:"file"`
	Why  string `json:"why"`
}

// adoptDir walks dir for receipts and records every file whose receipt
// proves it published (after.Check) as an adopted done job, unless the
// state knows it already. Receipts of files that are gone (deleted or moved
// after publishing) are passed over silently.
func adoptDir(ctx context.Context, st *queue.Store, cfg *config.Config, dir string, dryRun bool) (adoptReport, error) {
	rep := adoptReport{DryRun: dryRun, Adopted: []adoptedFile{}, Skipped: []skippedFile{}}
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
			rep.Skipped = append(rep.Skipped, skippedFile{File: p, Why: err.Error()})
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
			rep.Skipped = append(rep.Skipped, skippedFile{File: file, Why: err.Error()})
		case !ev.Done:
			rep.Skipped = append(rep.Skipped, skippedFile{File: file, Why: ev.Why})
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
			rep.Adopted = append(rep.Adopted, adoptedFile{File: a.Path, Splat: a.SplatID, URL: a.URL})
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
		rep.Adopted = append(rep.Adopted, adoptedFile{File: j.Path, Job: j.ID, Splat: j.SplatID, URL: j.ViewerURL})
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

func cmdAdopt(ctx context.Context, c *cli, args []string) int {
	flags := newFlags(c, "adopt")
	cfgPath := configFlag(c, flags)
	dryRun := flags.Bool("dry-run", false, "say what would be adopted, change nothing")
	asJSON := flags.Bool("json", false, "print JSON")
	pos, code, ok := parseOrExit(flags, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(c, flags, "give the one folder whose receipts to adopt (e.g. a watch folder)")
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return usageError(c, flags, "%v", err)
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	var rep adoptReport
	q := url.Values{"dir": {dir}}
	if *dryRun {
		q.Set("dry_run", "1")
	}
	body, live, err := adminCallTimeout(ctx, cfg.StateDir, http.MethodPost, "/v1/adopt?"+q.Encode(), 0)
	switch {
	case err != nil:
	case live:
		err = json.Unmarshal(body, &rep)
	default:
		rep, err = adoptOffline(ctx, cfg, dir, *dryRun)
		if err == nil {
			fmt.Fprintf(c.stderr, "(splatd is not running; wrote %s directly)\n", cfg.StateDir)
		}
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "adopt: %v\n", err)
		return exitFailure
	}
	printAdopt(c, rep, *asJSON)
	return exitOK
}

// adoptOffline adopts dir's receipts into the state directory itself, as
// no daemon is running. Rebuilding a lost state directory is what adopt is
// for, so a missing one is made; a dry run leaves nothing behind.
func adoptOffline(ctx context.Context, cfg *config.Config, dir string, dryRun bool) (adoptReport, error) {
	stateDir := cfg.StateDir
	if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
		if dryRun {
			tmp, err := os.MkdirTemp("", "splatd-adopt-dry-run-")
			if err != nil {
				return adoptReport{}, err
			}
			defer os.RemoveAll(tmp)
			stateDir = tmp
		} else if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return adoptReport{}, fmt.Errorf("state_dir: %w", err)
		}
	}
	var rep adoptReport
	err := withOfflineStore(stateDir, func(st *queue.Store) error {
		var err error
		rep, err = adoptDir(ctx, st, cfg, dir, dryRun)
		return err
	})
	return rep, err
}

// printAdopt prints what adopt did, as JSON or one line a file and a sum.
func printAdopt(c *cli, rep adoptReport, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	verb := "adopted"
	if rep.DryRun {
		verb = "would adopt"
	}
	for _, a := range rep.Adopted {
		job := ""
		if a.Job != 0 {
			job = fmt.Sprintf("job %d, ", a.Job)
		}
		fmt.Fprintf(c.stdout, "%s %s (%ssplat %s %s)\n", verb, a.File, job, a.Splat, a.URL)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(c.stdout, "not adopted %s: %s\n", s.File, s.Why)
	}
	fmt.Fprintf(c.stdout, "%s %d file(s) as done; %d already known; %d receipt(s) not evidence\n", verb, len(rep.Adopted), rep.Known, len(rep.Skipped))
}

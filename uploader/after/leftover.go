package after

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Leftover is a receipt in a move's destination folder whose file is not
// beside it, and the finalized job it is the receipt of: what a move leaves
// when a power cut undoes part of it (on a file system or a splatd that did
// not sync it).
type Leftover struct {
	Receipt string    // the receipt's path
	Job     state.Job // the job it is the receipt of
	// AtSource: the job's file (its inode) is back where it was: the move
	// is to be run again. Otherwise the file is at neither place.
	AtSource bool
}

// Leftovers walks dest, a folder moves go to (success_dir, failure_dir),
// for receipts whose file is not beside them, and calls found with each
// one that is the receipt of a final, finalized job of this state: lookup
// gives the job its "job" names, which must have the receipt's sha256 and
// move to the receipt's name under dest. A receipt whose file went on to
// another name (a later move picked one) is not a leftover.
func Leftovers(ctx context.Context, fsys *trustfs.FS, dest string, lookup func(id uint64) (state.Job, error), found func(Leftover)) error {
	return filepath.WalkDir(dest, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable folder is not where a move put anything
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if de.IsDir() || !de.Type().IsRegular() || !strings.HasSuffix(p, ReceiptSuffix) {
			return nil
		}
		file := strings.TrimSuffix(p, ReceiptSuffix)
		if existsIn(fsys, dest, file) {
			return nil
		}
		r, err := readReceiptIn(fsys, dest, file)
		if err != nil || r.Job == 0 || r.SHA256 == "" {
			return nil
		}
		j, err := lookup(r.Job)
		if err != nil || !j.Stage.Final() || !j.Finalized || j.SHA256 != r.SHA256 || !movesTo(j, dest, file) {
			return nil
		}
		seen := seenFile{trustfs.ID{Dev: j.Dev, Ino: j.Ino}, j.Size, j.ModTime, j.ID, j.SHA256}
		if seen.ID == (trustfs.ID{}) {
			return nil // a job from before IDs: its file cannot be known again
		}
		fi, err := fsys.Lstat(j.Root, j.Path)
		atSource := err == nil && trustfs.IDOf(fi) == seen.ID
		if !atSource && movedElsewhere(j, dest, seen) {
			return nil
		}
		found(Leftover{Receipt: p, Job: j, AtSource: atSource})
		return nil
	})
}

// movesTo says a move of j's file under dest may have put it at file: the
// name moveUnder (moveFolderUnder) tries first, or a numbered one.
func movesTo(j state.Job, dest, file string) bool {
	if splatfile.IsSOGFolder(j.Path) {
		return filepath.Base(file) == splatfile.SOGMeta && isNumbered(filepath.Dir(file), moveFolderTarget(j.Path, j.Root, dest), "")
	}
	want := moveTarget(j.Path, j.Root, dest)
	ext := filepath.Ext(want)
	return isNumbered(file, strings.TrimSuffix(want, ext), ext)
}

// isNumbered says p is base+ext, or base.N+ext for a number N of 1 or more.
func isNumbered(p, base, ext string) bool {
	if p == base+ext {
		return true
	}
	n, ok := strings.CutPrefix(p, base+".")
	if !ok {
		return false
	}
	if n, ok = strings.CutSuffix(n, ext); !ok || n == "" || strings.TrimLeft(n, "0123456789") != "" {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i >= 1 && strconv.Itoa(i) == n
}

// movedElsewhere says j's file is at one of the names a move under dest
// picks (the receipt looked at is one a later move left behind). A SOG
// folder's is not looked for.
func movedElsewhere(j state.Job, dest string, seen seenFile) bool {
	if splatfile.IsSOGFolder(j.Path) {
		return false
	}
	return movedTo(moveTarget(j.Path, j.Root, dest), seen) != ""
}

// leftoverLogMax is how many leftovers of one kind a start logs one by
// one; the rest are counted.
const leftoverLogMax = 20

// FinishLeftovers looks, once at start, in every folder its runners move
// files to for what an interrupted move left (Leftovers): a file back at
// its source is moved again (Finish); a receipt whose file is at neither
// place is logged as lost. It returns how many of each it found.
func (rs Runners) FinishLeftovers(ctx context.Context, lookup func(uint64) (state.Job, error)) (moved, lost int) {
	log := rs.Default.o.Logger
	for _, dest := range rs.dests() {
		err := Leftovers(ctx, rs.fs(), dest, lookup, func(l Leftover) {
			j := l.Job
			a := rs.For(j.Root)
			if l.AtSource && a.movesInto(j, dest) {
				moved++
				log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("receipt", state.Shown(l.Receipt)).
					Msg("a file whose move was recorded done is back at its source, its receipt in the move's folder: a power cut undid the move; moving it again")
				if rec, err := a.Finish(ctx, j); err != nil {
					log.Error().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Err(err).Msg("moving it again failed; tried again at the next start")
				} else {
					log.Info().Uint64("job", j.ID).Str("path", state.Shown(rec.File)).Msg("moved again")
				}
				return
			}
			if l.AtSource {
				return // the job's root no longer moves its files here
			}
			lost++
			if lost <= leftoverLogMax {
				log.Warn().Uint64("job", j.ID).Str("receipt", state.Shown(l.Receipt)).Str("source", j.Path).
					Msg("a receipt without its file: the job's file is neither beside it nor at its source (a power cut lost the move, or the file was removed by hand)")
			}
		})
		if err != nil && ctx.Err() == nil {
			log.Warn().Str("folder", state.Shown(dest)).Err(err).Msg("looking for what an interrupted move left")
		}
	}
	if lost > leftoverLogMax {
		log.Warn().Int("receipts", lost).Int("logged", leftoverLogMax).Msg("receipts without their file in the move folders (see the lines above)")
	}
	return moved, lost
}

// dests are the folders the runners move files to, each once.
func (rs Runners) dests() []string {
	var out []string
	add := func(a *Runner) {
		if a == nil {
			return
		}
		if a.o.OnSuccess == "move" && a.o.SuccessDir != "" {
			out = append(out, filepath.Clean(a.o.SuccessDir))
		}
		if a.o.OnFailure == "move" && a.o.FailureDir != "" {
			out = append(out, filepath.Clean(a.o.FailureDir))
		}
	}
	add(rs.Default)
	for _, a := range rs.Roots {
		add(a)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// movesInto says a's after-action moves final job j under dest.
func (a *Runner) movesInto(j state.Job, dest string) bool {
	switch j.Stage {
	case state.Done:
		return a.o.OnSuccess == "move" && filepath.Clean(a.o.SuccessDir) == dest
	case state.Failed:
		return a.o.OnFailure == "move" && filepath.Clean(a.o.FailureDir) == dest
	}
	return false
}

package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
	"github.com/splatd/splatd/watcher/trustfs"
)

// An unbundled SOG folder's job is its meta.json (the watcher's handle on
// it); what is hashed and uploaded is the bundled .sog built from the folder
// into the bundles folder of WorkDir. Its size and modification time are the job's Size and
// ModTime, so every later step's "is it still the file that was hashed"
// check holds the bundle to what was hashed. The bundle is built again only
// by the check step, from a folder that passed the check and settled.

// bundlePath names a folder's bundle by the folder's path, so a rebuild of
// an unchanged folder replaces the same file with the same bytes.
func (p *Pool) bundlePath(metaPath string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(metaPath)))
	return filepath.Join(p.bundleDir, hex.EncodeToString(sum[:12])+".sog")
}

// PublishedAs is the path a file is published as: path itself, or
// FOLDER.sog beside an unbundled SOG folder (path is its meta.json), whose
// title template and sidecar are then the folder's, as for the daemon.
func PublishedAs(path string) string { return splatfile.FolderAsFile("", path) }

// PublishedAsIn is PublishedAs for a file of the watch folder root: a SOG
// folder that is the root itself is published as root/FOLDER.sog, inside
// it (splatfile.FolderAsFile).
func PublishedAsIn(root, path string) string { return splatfile.FolderAsFile(root, path) }

// stepCheckFolder: queued → ready for an unbundled SOG folder. The folder
// must pass the check (a missing or short image waits like a short file),
// have been quiet for Settle, and its bundle, sized from the files' stat,
// be within the watch folder's size bounds, as a file must be; then its
// bundle is built and hashed.
func (p *Pool) stepCheckFolder(ctx context.Context, j state.Job) (state.Job, error) {
	// The folder is opened through the watch folder (trustfs): no link
	// leads out of it, and its images are read through that root only.
	dir, err := p.fs.OpenDir(j.Root, filepath.Dir(j.Path))
	if err != nil {
		return j, fileError(err)
	}
	defer dir.Close()
	f, err := splatfile.CheckSOGFolderIn(dir, j.Path)
	if errors.Is(err, splatfile.ErrIncomplete) {
		return j, &workerIncomplete{err: err, changed: j.ModTime}
	}
	if err != nil {
		return j, err
	}
	if quiet := p.o.Now().Sub(f.Latest); quiet < p.o.Timing.Settle {
		return j, &workerIncomplete{err: fmt.Errorf("%s: incomplete: a file of the folder changed %s ago; waiting until it settles", j.Path, quiet.Round(1e6)), changed: f.Latest}
	}
	lo, hi := p.bounds(j.Root)
	if why := BundleOutsideBounds(f.Size, lo, hi); why != "" {
		// The watcher saw only meta.json: a folder of sparse gigabytes
		// would otherwise be copied into state_dir and uploaded.
		return j, &step.FileError{Err: errors.New(why)}
	}
	// The build is the long part and has no side effect to finish: it
	// stops as soon as the pool drains, and the job stays queued.
	bctx, stop := p.untilDrain(ctx)
	defer stop()
	m := p.startCheck(j, CheckBundling, f.Size)
	sum, fi, err := buildBundle(bctx, f, p.bundlePath(j.Path), m)
	m.Stop()
	if err != nil {
		if errors.Is(context.Cause(bctx), step.ErrDrained) && ctx.Err() == nil {
			return j, step.ErrDrained
		}
		return j, fmt.Errorf("build the folder's bundle: %w", err)
	}
	// Titles and sidecars are the folder's, as if it were FOLDER.sog beside
	// it: "{{.Stem}}" is the folder's name, FOLDER.splat.yaml its sidecar
	// (inside it when the folder is the watch folder itself).
	asFile := PublishedAsIn(j.Root, j.Path)
	params, err := p.publish.Load().files.Params(asFile, j.Root, j.ModTime)
	if err != nil {
		return j, &step.FileError{Err: fmt.Errorf("publish parameters: %w", err)}
	}
	now := p.o.Now()
	if err := j.Move(state.Ready, now); err != nil {
		return j, err
	}
	j.Size, j.ModTime = fi.Size(), fi.ModTime()
	j.SHA256, j.Kind, j.Params = sum, string(splatfile.KindSOGFolder), params
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	return j, nil
}

// bounds are the min_size and max_size of the watch folder root (0, 0:
// none, when the pool has no bounds).
func (p *Pool) bounds(root string) (minSize, maxSize int64) {
	return p.publish.Load().files.SizeBounds(root)
}

// BundleOutsideBounds says why an unbundled SOG folder whose bundle is size
// bytes is not published under a watch folder's min_size and max_size (0:
// no bound), "" when it is: the check step's reason to fail its job, and
// the dry run's.
func BundleOutsideBounds(size, minSize, maxSize int64) string {
	why := state.OutsideBounds(size, minSize, maxSize)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("the SOG folder's bundle would be %s, %s: not built or uploaded", state.HumanSize(size), why)
}

// FileOutsideBounds says why a file of size bytes at path is not published
// under a watch folder's min_size and max_size (0: no bound), "" when it
// is: the check step's reason to fail its job, and `splatd publish`'s.
func FileOutsideBounds(path string, size, minSize, maxSize int64) string {
	why := state.OutsideBounds(size, minSize, maxSize)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("%s is %s, %s: not hashed or uploaded", path, state.HumanSize(size), why)
}

// dropBundle removes a folder job's bundle once the job is finished (done,
// failed, canceled): a retry or a change checks the folder and builds it
// again.
func (p *Pool) dropBundle(j state.Job) {
	if j.Stage.Finished() && splatfile.IsSOGFolder(j.Path) {
		if err := os.Remove(p.bundlePath(j.Path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Warn().Uint64("job", j.ID).Err(err).Msg("cannot remove the folder's bundle")
		}
	}
}

// buildBundle writes the folder's bundle to dst atomically (a temporary
// file renamed into place), dated with the folder's newest file so that the
// same folder gives the same bytes, size and time, and returns its sha256,
// hashed as it is written, and its stat; what is written also goes to also
// (nil: nowhere), a Meter. When ctx ends, the build stops within a MiB
// and the temporary file is removed.
func buildBundle(ctx context.Context, f splatfile.SOGFolder, dst string, also io.Writer) (string, os.FileInfo, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".bundle-*")
	if err != nil {
		return "", nil, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	w := io.MultiWriter(tmp, h)
	if also != nil {
		w = io.MultiWriter(tmp, h, also)
	}
	if err := splatfile.BuildSOGBundle(ctx, w, f); err != nil {
		tmp.Close()
		return "", nil, err
	}
	if err := tmp.Close(); err != nil {
		return "", nil, err
	}
	if err := os.Chtimes(tmp.Name(), f.Latest, f.Latest); err != nil {
		return "", nil, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(dst)
	return hex.EncodeToString(h.Sum(nil)), fi, err
}

// OneShotSource is what `splatd publish` sends of one path, weighed before
// it looks for an earlier publish of it.
type OneShotSource struct {
	// Path is the file to upload: the path itself, or an unbundled SOG
	// folder's bundle, FOLDER.sog in a temporary folder of its own.
	Path string
	// SHA256 is the folder's bundle's, hashed as it was built: what an
	// earlier publish of the folder is looked up by. "" for a file.
	SHA256 string
	// Info is the folder's check (Size: the bundle's); zero for a file.
	Info splatfile.Info
	tmp  string
}

// Close removes the folder's bundle, if one was built.
func (s *OneShotSource) Close() {
	if s != nil && s.tmp != "" {
		os.RemoveAll(s.tmp)
	}
}

// PrepareOneShot holds path to minSize and maxSize (0: no bound) as the
// check step holds a job, before it is read (an unbundled SOG folder, path
// its meta.json, by its bundle's size from the files' stat); a folder within
// them is bundled once, hashed as it is written. The build stops within a
// MiB when ctx ends.
func PrepareOneShot(ctx context.Context, path string, minSize, maxSize int64) (*OneShotSource, error) {
	if !splatfile.IsSOGFolder(path) {
		f, fi, err := new(trustfs.FS).OpenRegular("", path) // no link, pipe or device
		if err != nil {
			return nil, err
		}
		f.Close()
		if why := FileOutsideBounds(path, fi.Size(), minSize, maxSize); why != "" {
			return nil, errors.New(why)
		}
		return &OneShotSource{Path: path}, nil
	}
	dir, err := new(trustfs.FS).OpenDir("", filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	folder, err := splatfile.CheckSOGFolderIn(dir, path)
	if err != nil {
		return nil, err
	}
	if why := BundleOutsideBounds(folder.Size, minSize, maxSize); why != "" {
		return nil, errors.New(why)
	}
	s := &OneShotSource{Info: folder.Info}
	if s.tmp, err = os.MkdirTemp("", "splatd-publish-"); err != nil {
		return nil, err
	}
	s.Path = filepath.Join(s.tmp, step.FileName(path))
	if s.SHA256, _, err = buildBundle(ctx, folder, s.Path, nil); err != nil {
		s.Close()
		return nil, fmt.Errorf("build the folder's bundle: %w", err)
	}
	return s, nil
}

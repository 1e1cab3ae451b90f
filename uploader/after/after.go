// Package after finishes a job once it is final: the after-action on its
// file (keep, delete, or move under success_dir / failure_dir, keeping the
// relative path and carrying the sidecar) and the receipt <file>.splat.json
// written atomically beside the file. It never calls the API.
package after

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/sidecar"
)

// Options configures what happens to a file once its job is final
// (after.* in the config).
type Options struct {
	OnSuccess  string // keep | delete | move
	SuccessDir string
	OnFailure  string // keep | move
	FailureDir string
	Receipt    bool // write <file>.splat.json
	// Lookup returns another job by id; a duplicate's receipt names the
	// splat that its content was published as.
	Lookup func(id uint64) (state.Job, error)
	Logger zerolog.Logger
}

// Runner runs the after-actions and writes receipts. Finish is idempotent: a
// crash between a job's final commit and the end of Finish runs it again at
// the next start, and a file already moved or deleted is not an error.
type Runner struct {
	o Options
}

// New returns the after-action runner.
func New(o Options) *Runner {
	if o.OnSuccess == "" {
		o.OnSuccess = "keep"
	}
	if o.OnFailure == "" {
		o.OnFailure = "keep"
	}
	return &Runner{o: o}
}

// Receipt is the JSON written beside a finished file as <file>.splat.json.
type Receipt struct {
	File        string       `json:"file"`
	Size        int64        `json:"size"`
	SHA256      string       `json:"sha256"`
	Title       string       `json:"title"`
	Format      string       `json:"format"`
	Protocol    string       `json:"protocol"` // legacy | v1
	Splat       ReceiptSplat `json:"splat"`
	Status      string       `json:"status"` // done | duplicate | failed | held
	Message     string       `json:"message"`
	PublishedAt *time.Time   `json:"published_at"`
	CompletedAt *time.Time   `json:"completed_at"`
	Job         uint64       `json:"job"`
	DuplicateOf uint64       `json:"duplicate_of,omitempty"`
}

// ReceiptSplat identifies the published splat; empty when none was made.
type ReceiptSplat struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	// URL is the viewer link; ViewerURL repeats it under the v1 API's
	// name, so that scripts written against either find it.
	URL       string `json:"url"`
	ViewerURL string `json:"viewer_url"`
	// EditURL is the editor link v1's complete answers with ("" under
	// legacy, and when another daemon of a fleet completed the upload).
	EditURL string `json:"edit_url,omitempty"`
}

// receiptSplat is the splat part of j's receipt.
func receiptSplat(j state.Job) ReceiptSplat {
	r := ReceiptSplat{ID: j.SplatID, Hash: j.SplatHash, URL: j.ViewerURL, ViewerURL: j.ViewerURL}
	if j.V1 != nil {
		r.EditURL = j.V1.EditURL
	}
	return r
}

// ReceiptPath is where the receipt of a file is written.
func ReceiptPath(file string) string { return file + ".splat.json" }

// Finish applies the after-action of a final job and writes its receipt. It
// returns where the file now is ("" when deleted).
func (a *Runner) Finish(ctx context.Context, j state.Job) (string, error) {
	rec := a.receipt(j)
	file := j.Path
	var err error
	switch {
	case j.Stage == state.Done && a.o.OnSuccess == "move":
		file, err = moveUnder(j.Path, j.Root, a.o.SuccessDir)
	case j.Stage == state.Done && a.o.OnSuccess == "delete":
		err = os.Remove(j.Path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			err = nil
			_ = os.Remove(sidecar.Path(j.Path))
		}
	case j.Stage == state.Failed && a.o.OnFailure == "move":
		// moveUnder finds a file it moved before a crash at its target.
		file, err = moveUnder(j.Path, j.Root, a.o.FailureDir)
		if errors.Is(err, errFileGone) {
			file, err = j.Path, nil
		}
	}
	if j.Stage == state.Failed && !fileExists(file) {
		// The file went away before it was published (renamed under a name
		// that matched include, deleted by its owner): a receipt would be
		// litter beside nothing. The job keeps the reason (splatd jobs).
		a.o.Logger.Info().Uint64("job", j.ID).Str("path", j.Path).Str("reason", rec.Message).Msg("file gone; no receipt")
		return file, nil
	}
	if err != nil {
		return j.Path, fmt.Errorf("after-action for %s: %w", j.Path, err)
	}
	if file != j.Path {
		rec.File = file
	}
	if a.o.Receipt {
		// A deleted file keeps its receipt where it was: the operator's
		// record that it was published and may be gone.
		at := file
		if err := WriteReceipt(ReceiptPath(at), rec); err != nil {
			return file, fmt.Errorf("receipt for %s: %w", file, err)
		}
	}
	return file, nil
}

// protocol names the protocol that published (or would publish) j.
func protocol(j state.Job) string {
	if j.Protocol == "" {
		return "legacy"
	}
	return j.Protocol
}

func (a *Runner) receipt(j state.Job) Receipt {
	r := Receipt{
		File:        j.Path,
		Size:        j.Size,
		SHA256:      j.SHA256,
		Title:       j.Params.Title,
		Format:      j.Params.Format,
		Protocol:    protocol(j),
		Splat:       receiptSplat(j),
		Status:      string(j.Stage),
		PublishedAt: j.PublishedAt,
		CompletedAt: j.CompletedAt,
		Job:         j.ID,
		DuplicateOf: j.DuplicateOf,
	}
	if j.Protocol == state.ProtocolV1 {
		// v1 has no output-format choice: the receipt names what was sent.
		r.Format = map[string]string{"ply": "ply", "compressed-ply": "ply", "sog": "sog"}[j.Kind]
	}
	switch j.Stage {
	case state.Done:
		r.Message = j.TaskMessage
		if j.DuplicateOf != 0 {
			r.Status = "duplicate"
			r.Message = fmt.Sprintf("same content (sha256) as job %d: not published again", j.DuplicateOf)
			if a.o.Lookup != nil {
				if orig, err := a.o.Lookup(j.DuplicateOf); err == nil {
					r.Splat = receiptSplat(orig)
					r.PublishedAt, r.CompletedAt = orig.PublishedAt, orig.CompletedAt
					if r.Title == "" {
						r.Title, r.Format = orig.Params.Title, orig.Params.Format
					}
					if orig.Path != "" {
						r.Message = fmt.Sprintf("same content (sha256) as %s (job %d): not published again", orig.Path, orig.ID)
					}
				}
			}
		}
	case state.Failed:
		r.Message = j.FailReason
		if r.Message == "" {
			r.Message = j.LastError
		}
	case state.Held:
		r.Message = j.FailReason
		if r.Message == "" {
			r.Message = "publish outcome unknown after a restart; held for an operator (splatd retry " + strconv.FormatUint(j.ID, 10) + ")"
		}
	}
	return r
}

// WriteReceipt writes r to path atomically: a temp file in the same folder,
// fsynced, then renamed over the target, so a reader never sees half a receipt.
func WriteReceipt(path string, r Receipt) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o644)
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // harmless after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// errFileGone: the file to move is neither where it was nor at its target.
var errFileGone = errors.New("file is gone")

// moveUnder moves file to the same relative place under dest (relative to
// root), never overwriting: a taken name gets ".1", ".2", … before its
// extension. The sidecar travels with its file. A file already gone (moved
// by an earlier run of Finish) is looked for at its destination.
func moveUnder(file, root, dest string) (string, error) {
	rel := filepath.Base(file)
	if root != "" {
		if r, err := filepath.Rel(root, file); err == nil && !strings.HasPrefix(r, "..") {
			rel = r
		}
	}
	target := filepath.Join(dest, rel)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return file, err
	}
	if _, err := os.Lstat(file); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(target); err == nil {
			return target, nil // moved before a crash; nothing left to do
		}
		return file, fmt.Errorf("%w: %w", errFileGone, err)
	}
	target = freeName(target)
	if err := moveFile(file, target); err != nil {
		return file, err
	}
	if sc := sidecar.Path(file); fileExists(sc) {
		_ = moveFile(sc, freeName(sidecar.Path(target)))
	}
	return target, nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func freeName(p string) string {
	if !fileExists(p) {
		return p
	}
	ext := filepath.Ext(p)
	base := strings.TrimSuffix(p, ext)
	for i := 1; ; i++ {
		c := fmt.Sprintf("%s.%d%s", base, i, ext)
		if !fileExists(c) {
			return c
		}
	}
}

// moveFile renames, or copies and removes when the target is on another
// filesystem (EXDEV). The copy is fsynced before the source is removed, and
// os.Link refuses to replace an existing name, so nothing is overwritten.
func moveFile(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return os.Remove(src)
	} else if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(src)
}

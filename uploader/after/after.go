// Package after finishes a job once it is final: the after-action on its
// file (keep, delete, or move under success_dir / failure_dir, keeping the
// relative path and carrying the sidecar) and the receipt <file>.splat.json
// written atomically beside the file. It never calls the API.
//
// A receipt is also evidence (evidence.go): one saying done for a file's
// current sha256 proves the file published, so a daemon with a new or lost
// state directory adopts such a file as done instead of publishing it again.
// A failed action is an *ActionError naming it (receipt, move, delete), and
// a move never leaves a second copy behind.
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
	"github.com/splatd/splatd/uploader/splatfile"
)

// Options configures what happens to a file once its job is final
// (after.* in the config).
type Options struct {
	OnSuccess  string // keep | delete | move
	SuccessDir string
	OnFailure  string // keep | move
	FailureDir string
	Receipt    bool // write <file>.splat.json
	// Protocol ("legacy" when empty) and API (api.base_url) are recorded in
	// receipts, so that adoption trusts only receipts of the same service.
	Protocol string
	API      string
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
	Splat       ReceiptSplat `json:"splat"`
	Status      string       `json:"status"` // done | duplicate | failed | held | canceled
	Message     string       `json:"message"`
	PublishedAt *time.Time   `json:"published_at"`
	CompletedAt *time.Time   `json:"completed_at"`
	Job         uint64       `json:"job"`
	DuplicateOf uint64       `json:"duplicate_of,omitempty"`
	// Protocol and API say through which protocol and to which service
	// (api.base_url) the file was published; a receipt that names another
	// is not evidence for this daemon (see Evidence).
	Protocol string `json:"protocol"` // legacy | v1
	API      string `json:"api,omitempty"`
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

// The after-actions, as named in errors, `splatd jobs` and the
// splatd_after_action_errors_total{action} metric.
const (
	ActionReceipt = "receipt"
	ActionMove    = "move"
	ActionDelete  = "delete"
)

// ActionError is a failed after-action: which one, and why. The pool
// records it on the job and tries again on its own backoff.
type ActionError struct {
	Action string // ActionReceipt, ActionMove or ActionDelete
	Err    error
}

func (e *ActionError) Error() string { return e.Action + ": " + e.Err.Error() }
func (e *ActionError) Unwrap() error { return e.Err }

// AfterAction names the failed action (the pool reads it through this
// method, without importing this package).
func (e *ActionError) AfterAction() string { return e.Action }

// Finish applies the after-action of a final job and writes its receipt. It
// returns where the file now is ("" when deleted). A failed move or delete
// still writes the receipt beside the file where it stayed, so the evidence
// that it was published exists while the action is retried; a later
// successful move writes the receipt at the target and removes the one left
// at the source. An error is an *ActionError.
func (a *Runner) Finish(ctx context.Context, j state.Job) (string, error) {
	rec := a.receipt(j)
	file := j.Path
	var actErr error
	switch {
	case j.Stage == state.Done && a.o.OnSuccess == "move":
		var err error
		if file, err = moveUnder(j.Path, j.Root, a.o.SuccessDir); err != nil {
			file, actErr = j.Path, &ActionError{ActionMove, fmt.Errorf("after-action for %s: %w", j.Path, err)}
		}
	case j.Stage == state.Done && a.o.OnSuccess == "delete":
		err := os.Remove(j.Path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(sidecar.Path(j.Path))
		} else {
			actErr = &ActionError{ActionDelete, fmt.Errorf("after-action for %s: %w", j.Path, err)}
		}
	case j.Stage == state.Failed && a.o.OnFailure == "move":
		// moveUnder finds a file it moved before a crash at its target.
		var err error
		file, err = moveUnder(j.Path, j.Root, a.o.FailureDir)
		switch {
		case errors.Is(err, errFileGone):
			file = j.Path
		case err != nil:
			file, actErr = j.Path, &ActionError{ActionMove, fmt.Errorf("after-action for %s: %w", j.Path, err)}
		}
	}
	if (j.Stage == state.Failed || j.Stage == state.Canceled) && !fileExists(file) {
		// The file went away before it was published (renamed under a name
		// that matched include, deleted by its owner): a receipt would be
		// litter beside nothing. The job keeps the reason (splatd jobs).
		a.o.Logger.Info().Uint64("job", j.ID).Str("path", j.Path).Str("reason", rec.Message).Msg("file gone; no receipt")
		return file, nil
	}
	if file != j.Path {
		rec.File = file
	}
	if a.o.Receipt {
		// A deleted file keeps its receipt where it was: the operator's
		// record that it was published and may be gone.
		if err := WriteReceipt(ReceiptPath(file), rec); err != nil {
			if actErr == nil {
				actErr = &ActionError{ActionReceipt, fmt.Errorf("receipt for %s: %w", file, err)}
			}
		} else if file != j.Path {
			// Left by an earlier attempt whose move failed.
			_ = os.Remove(ReceiptPath(j.Path))
		}
	}
	if actErr != nil {
		return file, actErr
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
		Splat:       receiptSplat(j),
		Status:      string(j.Stage),
		PublishedAt: j.PublishedAt,
		CompletedAt: j.CompletedAt,
		Job:         j.ID,
		DuplicateOf: j.DuplicateOf,
		Protocol:    protocol(j),
		API:         a.o.API,
	}
	if j.Protocol == state.ProtocolV1 {
		// v1 has no output-format choice: the receipt names what was sent.
		r.Format = splatfile.Kind(j.Kind).SourceFormat()
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
	case state.Canceled:
		r.Message = j.TaskMessage
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

// moveFile moves src to dst without ever leaving two copies or replacing
// an existing dst. On one filesystem it links dst (os.Link refuses an
// existing name) and removes src; across filesystems (EXDEV), or where
// links are not allowed, it copies to a temp name in dst's folder, fsyncs,
// links that to dst and removes the temp name, then removes src. When src
// cannot be removed (a folder the daemon may not write, an immutable
// file), dst is removed again: a half-done move would otherwise copy the
// file once more at every retry and restart (ro1.ply, ro1.1.ply, …).
func moveFile(src, dst string) error {
	err := os.Link(src, dst)
	if err != nil && !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	if err != nil {
		if err := copyTo(src, dst); err != nil {
			return err
		}
	}
	if err := removeFile(src); err != nil {
		if rerr := os.Remove(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("cannot remove the source (%w) nor the copy %s (%v): remove one by hand", err, dst, rerr)
		}
		return fmt.Errorf("cannot remove the source, so the copy at %s was removed again: %w", dst, err)
	}
	return nil
}

// removeFile is os.Remove; tests replace it to make a source unremovable.
var removeFile = os.Remove

// copyTo copies src to a temp name beside dst, fsynced, and links it to
// dst; dst never exists half-written.
func copyTo(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the link, or on failure
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
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
	return os.Link(tmp.Name(), dst)
}

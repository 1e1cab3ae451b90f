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
	"io/fs"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
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
	// FS is the trust boundary every access under a watch folder goes
	// through (nil: one that knows no watch folders).
	FS *trustfs.FS
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
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Title  string `json:"title"`
	// SourceFormat is the file's format (ply, sog, spz); OutputFormat the
	// splat's: the publish.format asked for under legacy, the service's
	// under v1 (absent until the service names it). Format is the older
	// key, written under legacy alone, as OutputFormat, for the scripts
	// that read it; a v1 receipt of before had the source format there.
	SourceFormat string       `json:"source_format,omitempty"`
	OutputFormat string       `json:"output_format,omitempty"`
	Format       string       `json:"format,omitempty"`
	Splat        ReceiptSplat `json:"splat"`
	Status       string       `json:"status"` // done | duplicate | failed | held | canceled
	Message      string       `json:"message"`
	PublishedAt  *time.Time   `json:"published_at"`
	CompletedAt  *time.Time   `json:"completed_at"`
	Job          uint64       `json:"job"`
	DuplicateOf  uint64       `json:"duplicate_of,omitempty"`
	// Protocol and API say through which protocol and to which service
	// (api.base_url) the file was published; a receipt that names another
	// is not evidence for this daemon (see Evidence).
	Protocol string `json:"protocol"` // legacy | v1
	API      string `json:"api,omitempty"`
	// Uploaded describes the bytes sent when they were an encoding of the
	// file (publish.encode) rather than the file; Size and SHA256 above
	// stay the source's, which dedupe and adoption go by.
	Uploaded *ReceiptUpload `json:"uploaded,omitempty"`
	// EncodeSkipped says why publish.encode's encoding was not made: the
	// file itself was sent.
	EncodeSkipped string `json:"encode_skipped,omitempty"`
}

// PublishFormat is the legacy output format the receipt's publish asked
// for: output_format, else the older format key of a legacy receipt; ""
// for v1, which has no such choice.
func (r Receipt) PublishFormat() string {
	if r.Protocol == state.ProtocolV1 {
		return ""
	}
	if r.OutputFormat != "" {
		return r.OutputFormat
	}
	return r.Format
}

// ReceiptUpload is the file uploaded in place of the source.
type ReceiptUpload struct {
	Encoding string `json:"encoding"` // sog
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
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

// ReceiptSuffix ends the name of every receipt: the file's name and it.
const ReceiptSuffix = ".splat.json"

// ReceiptPath is where the receipt of a file is written.
func ReceiptPath(file string) string { return file + ReceiptSuffix }

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

// Finish applies the after-action of a final job and writes its receipt,
// returning the receipt with File where the file now is (its old name when
// deleted); an error is an *ActionError. The receipt reaches its final place before the file leaves
// its own, and a receipt that cannot be written stops the action
// (docs/durability.md, "Where the receipt goes").
func (a *Runner) Finish(ctx context.Context, j state.Job) (Receipt, error) {
	rec := a.receipt(j)
	p := &placement{a: a, j: j, rec: rec}
	file, fileRoot, actErr := a.act(j, p.place)
	if p.err != nil {
		actErr = &ActionError{ActionReceipt, p.err}
	}
	if (j.Stage == state.Failed || j.Stage == state.Canceled) && !existsIn(a.o.FS, fileRoot, file) {
		// The file went away before it was published (renamed under a name
		// that matched include, deleted by its owner): a receipt would be
		// litter beside nothing. The job keeps the reason (splatd jobs).
		a.o.Logger.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("reason", rec.Message).Msg("file gone; no receipt")
		if p.placed != "" && (p.placed != file || p.placedRoot != fileRoot) {
			// Written at the target of a move the file never reached.
			_ = a.o.FS.RemoveIf(p.placedRoot, ReceiptPath(p.placed), trustfs.ID{})
		}
		rec.File = file
		return rec, nil
	}
	rec.File = file
	if a.o.Receipt {
		if err := a.settleReceipt(j, p, rec, fileRoot); err != nil && actErr == nil {
			actErr = err
		}
	}
	if actErr != nil {
		return rec, actErr
	}
	return rec, nil
}

// placement is where Finish's receipt went ahead of the file, or why it
// could not.
type placement struct {
	a                  *Runner
	j                  state.Job
	rec                Receipt
	placed, placedRoot string // where place wrote the receipt
	err                error  // why it could not
	gaveUp             string // where none can be written (logged)
}

// place writes the receipt as file's (under root) before the file leaves
// its place for file; an error stops the action.
func (p *placement) place(root, file string) error {
	a, j := p.a, p.j
	if !a.o.Receipt {
		return nil
	}
	r := p.rec
	r.File = file
	err := writeReceipt(a.o.FS, root, ReceiptPath(file), r)
	switch {
	case errors.As(err, new(*trustfs.EscapeError)),
		errors.As(err, new(*trustfs.NameTooLongError)) && !existsIn(a.o.FS, j.Root, j.Path):
		// No retry would help, and no file is kept by stopping: the
		// action goes on without a receipt.
		a.o.Logger.Warn().Uint64("job", j.ID).Err(err).Msg("receipt not written")
		p.gaveUp = file
		return nil
	case err != nil:
		// The file stays where it is: moved or deleted without its
		// receipt, nothing would show it published.
		p.err = fmt.Errorf("receipt for %s: %w: the file stays where it is until its receipt can be written%s",
			file, err, receiptHint(err))
		return p.err
	}
	p.placed, p.placedRoot = file, root
	return nil
}

// settleReceipt writes rec beside rec.File (under fileRoot) unless place
// did, and removes the receipts left where the file is not.
func (a *Runner) settleReceipt(j state.Job, p *placement, rec Receipt, fileRoot string) error {
	file := rec.File
	var err error
	switch {
	case p.placed == file && p.placedRoot == fileRoot:
		// Written before the file left.
	case p.gaveUp == file && p.placed == "":
		// Logged by place.
	default:
		err = writeReceipt(a.o.FS, fileRoot, ReceiptPath(file), rec)
	}
	var actErr error
	switch {
	case errors.As(err, new(*trustfs.EscapeError)), errors.As(err, new(*trustfs.NameTooLongError)):
		// The file's folder is now a link out of the watch folder, or
		// the file's name leaves no room for ".splat.json": no receipt
		// is written, and no retry would help.
		a.o.Logger.Warn().Uint64("job", j.ID).Err(err).Msg("receipt not written")
	case err != nil:
		actErr = &ActionError{ActionReceipt, fmt.Errorf("receipt for %s: %w", file, err)}
	case file != j.Path:
		// Left by an earlier attempt whose move failed.
		_ = a.o.FS.RemoveIf(j.Root, ReceiptPath(j.Path), trustfs.ID{})
	}
	if p.placed != "" && (p.placed != file || p.placedRoot != fileRoot) {
		// Written at the target of a move that failed: the file, and
		// its receipt, stayed where they were.
		_ = a.o.FS.RemoveIf(p.placedRoot, ReceiptPath(p.placed), trustfs.ID{})
	}
	return actErr
}

// act runs j's after-action on the file the job read (its recorded inode:
// another file put at its name since is left alone). It returns where the
// file now is and the folder root to reach it through. place(root, file)
// is called before the file leaves its place, with where it goes (the
// file itself for a delete); its error stops the action.
func (a *Runner) act(j state.Job, place func(root, file string) error) (file, root string, actErr error) {
	file, root = j.Path, j.Root
	seen := seenFile{trustfs.ID{Dev: j.Dev, Ino: j.Ino}, j.Size, j.ModTime, j.ID, j.SHA256}
	placeIn := func(root string) func(string) error {
		return func(target string) error { return place(root, target) }
	}
	switch {
	case j.Stage == state.Done && a.o.OnSuccess == "move":
		target, err := move(a.o.FS, j.Path, j.Root, a.o.SuccessDir, seen, placeIn(a.o.SuccessDir))
		if err != nil {
			return file, root, a.actionError(j, ActionMove, err)
		}
		return target, a.o.SuccessDir, nil
	case j.Stage == state.Done && a.o.OnSuccess == "delete" && splatfile.IsSOGFolder(j.Path):
		if err := place(j.Root, j.Path); err != nil {
			return file, root, nil // Finish reports the receipt's error
		}
		if err := removeFolder(a.o.FS, j.Path, j.Root); err != nil {
			return file, root, a.actionError(j, ActionDelete, err)
		}
	case j.Stage == state.Done && a.o.OnSuccess == "delete":
		if err := place(j.Root, j.Path); err != nil {
			return file, root, nil // Finish reports the receipt's error
		}
		err := removeSource(a.o.FS, j.Root, j.Path, seen.ID)
		switch {
		case err == nil || errors.Is(err, fs.ErrNotExist):
			_ = a.o.FS.RemoveIf(j.Root, sidecar.Path(j.Path), trustfs.ID{})
		case errors.As(err, new(*trustfs.ReplacedError)):
			a.o.Logger.Warn().Uint64("job", j.ID).Err(err).Msg("not deleted")
		default:
			return file, root, a.actionError(j, ActionDelete, err)
		}
	case j.Stage == state.Failed && a.o.OnFailure == "move":
		// moveUnder finds a file it moved before a crash at its target.
		target, err := move(a.o.FS, j.Path, j.Root, a.o.FailureDir, seen, placeIn(a.o.FailureDir))
		switch {
		case errors.Is(err, errFileGone):
		case err != nil:
			return file, root, a.actionError(j, ActionMove, err)
		default:
			return target, a.o.FailureDir, nil
		}
	}
	return file, root, nil
}

// move moves a job's file under dest (moveUnder), or its whole folder for
// an unbundled SOG folder (moveFolderUnder); place is called before the
// file leaves (moveUnder).
func move(fsys *trustfs.FS, file, root, dest string, seen seenFile, place func(string) error) (string, error) {
	if splatfile.IsSOGFolder(file) {
		return moveFolderUnder(fsys, file, root, dest, place)
	}
	return moveUnder(fsys, file, root, dest, seen, place)
}

// actionError is a failed move or delete; a file replaced since the job
// read it, or a link, pipe or path out of the folder there now, is logged
// and left alone rather than retried for ever.
func (a *Runner) actionError(j state.Job, action string, err error) error {
	if errors.As(err, new(*trustfs.ReplacedError)) || errors.As(err, new(*trustfs.NotRegularError)) ||
		errors.As(err, new(*trustfs.EscapeError)) {
		a.o.Logger.Warn().Uint64("job", j.ID).Err(err).Msg("after-action skipped")
		return nil
	}
	return &ActionError{action, fmt.Errorf("after-action for %s: %w", j.Path, err)}
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
		Splat:       receiptSplat(j),
		Status:      string(j.Stage),
		PublishedAt: j.PublishedAt,
		CompletedAt: j.CompletedAt,
		Job:         j.ID,
		DuplicateOf: j.DuplicateOf,
		Protocol:    protocol(j),
		API:         a.o.API,
	}
	r.SourceFormat = splatfile.Kind(j.Kind).SourceFormat()
	if j.Protocol == state.ProtocolV1 {
		if j.V1 != nil {
			r.OutputFormat = j.V1.Output
		}
	} else {
		r.OutputFormat, r.Format = j.Params.Format, j.Params.Format
	}
	if e := j.Encoded; e != nil {
		r.Uploaded = &ReceiptUpload{Encoding: e.Encoding, Size: e.Size, SHA256: e.SHA256}
	}
	r.EncodeSkipped = j.EncodeSkipped
	switch j.Stage {
	case state.Done:
		r.Message = j.TaskMessage
		if j.DuplicateOf != 0 {
			a.duplicateReceipt(&r, j)
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

// duplicateReceipt makes r the receipt of duplicate j: the original's splat
// and times, and its title and format where j has none.
func (a *Runner) duplicateReceipt(r *Receipt, j state.Job) {
	r.Status = "duplicate"
	r.Message = fmt.Sprintf("same content (sha256) as job %d: not published again", j.DuplicateOf)
	if a.o.Lookup == nil {
		return
	}
	orig, err := a.o.Lookup(j.DuplicateOf)
	if err != nil {
		return
	}
	r.Splat = receiptSplat(orig)
	r.PublishedAt, r.CompletedAt = orig.PublishedAt, orig.CompletedAt
	if r.Title == "" && j.Protocol != state.ProtocolV1 {
		r.Title, r.OutputFormat, r.Format = orig.Params.Title, orig.Params.Format, orig.Params.Format
	} else if r.Title == "" {
		r.Title = orig.Params.Title
	}
	if orig.Path != "" {
		r.Message = fmt.Sprintf("same content (sha256) as %s (job %d): not published again", orig.Path, orig.ID)
	}
}

// receiptHint says what lets a receipt that failed with err be written.
func receiptHint(err error) string {
	if errors.As(err, new(*trustfs.NameTooLongError)) {
		return " (the name leaves no room for .splat.json: rename the file shorter, or set after.receipt: false)"
	}
	return ""
}

// writeReceipt writes a receipt (writeReceiptIn); tests replace it to make
// a folder refuse writes.
var writeReceipt = writeReceiptIn

// WriteReceipt writes r to path atomically: a temp file in the same folder,
// fsynced, then renamed over the target, so a reader never sees half a
// receipt. A link at path is replaced, never written through.
func WriteReceipt(path string, r Receipt) error { return writeReceiptIn(nil, "", path, r) }

// writeReceiptIn is WriteReceipt through the folder root (path's own
// folder when root is "").
func writeReceiptIn(fsys *trustfs.FS, root, path string, r Receipt) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return fsys.WriteAtomic(root, path, append(b, '\n'), 0o644)
}

package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// OneShotOptions tunes PublishFile, the foreground publish of `splatd
// publish`. It has no queue behind it: what it does not finish is not resumed.
type OneShotOptions struct {
	// Protocol is ProtocolLegacy ("" too) or ProtocolV1: which API the file
	// goes through.
	Protocol string
	// ParallelParts is how many v1 parts are sent at once (upload.
	// parallel_parts). Zero: 4.
	ParallelParts int
	// PollInterval and PollMaxInterval pace the polling after publish; the
	// interval doubles up to the maximum. PollTimeout bounds the whole wait.
	PollInterval, PollMaxInterval, PollTimeout time.Duration
	// Progress, when set, receives bytes sent of the file's size.
	Progress func(sent, size int64)
	// Stage, when set, is told each step as it starts ("sign" or "create",
	// "upload", "publish", "processing"), each retry, each v1 "resync" (a
	// session read again or created again) and each unknown task status.
	Stage func(step, detail string)
	// Policy is the retry rule; its one-shot patience (state.ProfileOneShot:
	// 5 tries of each step) bounds the retries of network errors, timeouts,
	// a stalled upload, 408, 429, 5xx and a refused signed URL.
	Policy state.Policy
	// Now and After are the clock (tests inject a fake one). Zero: time.Now
	// and time.After.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

func (o *OneShotOptions) fill() {
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.PollMaxInterval < o.PollInterval {
		o.PollMaxInterval = 30 * time.Second
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 2 * time.Hour
	}
	if o.Stage == nil {
		o.Stage = func(string, string) {}
	}
	if o.ParallelParts <= 0 {
		o.ParallelParts = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
}

// ErrProcessingFailed wraps the server's task message when processing ends
// in a failed status.
var ErrProcessingFailed = errors.New("processing failed")

// Published is what a one-shot publish learnt of its splat: its id, its
// viewer link and the last processing status seen.
type Published struct {
	ID, URL, Status string
	// Message is the server's text of a failed processing (legacy only).
	Message string
}

// PublishFile publishes one file with the publish parameters params
// through the API o.Protocol names, and polls it to a terminal status. Each
// call is retried as the one-shot patience says (Retry), so that someone
// waiting at a terminal gets an answer. The returned Published is the last
// record seen, also on failure.
func PublishFile(ctx context.Context, c *api.Client, path string, params state.PublishParams, o OneShotOptions) (Published, error) {
	o.fill()
	if o.Protocol == ProtocolV1 {
		return o.publishV1(ctx, c, path, params)
	}
	src, err := openSource(ctx, path, false)
	if err != nil {
		return Published{}, err
	}
	defer src.close()
	up, err := o.upload(ctx, c, src, folderName(path))
	if err != nil {
		return Published{}, err
	}
	o.Stage("publish", "")
	r := api.PublishRequest{Key: up.Key, KeyField: up.KeyField, PublishParams: params}
	var sp api.Splat
	err = o.Retry(ctx, func() error {
		var err error
		sp, err = c.Publish(ctx, r)
		return err
	})
	if err != nil {
		return Published{}, err
	}
	rec, outcome := legacyRecord(sp)
	return o.poll(ctx, rec, outcome, func() (Published, api.Outcome, error) {
		next, err := c.Splat(ctx, rec.ID)
		rec, outcome := legacyRecord(next)
		return rec, outcome, err
	})
}

// legacyRecord is what a legacy splat record says of the publish.
func legacyRecord(sp api.Splat) (Published, api.Outcome) {
	return Published{ID: sp.ID, URL: sp.URL, Status: sp.Task.Status, Message: sp.Task.Message}, sp.Outcome()
}

// source is the file a one-shot uploads: the file itself, or the bundle
// built from an unbundled SOG folder (path is its meta.json), under either
// protocol.
type source struct {
	f      *os.File
	size   int64
	format api.SourceFormat
	built  *OneShotSource // the folder's bundle, removed by close
}

func (s *source) close() {
	if s.f != nil {
		s.f.Close()
	}
	s.built.Close()
}

// openSource opens what is to be uploaded of path; with v1 it also checks
// its content for the create's sourceFormat (a legacy upload is the file
// as the caller checked it). A folder's meta.json is bundled here, with no
// size bounds: `splatd publish` passes the bundle PrepareOneShot built.
func openSource(ctx context.Context, path string, v1 bool) (*source, error) {
	src := &source{}
	upload := path
	if splatfile.IsSOGFolder(path) {
		var err error
		if src.built, err = PrepareOneShot(ctx, path, 0, 0); err != nil {
			return nil, err
		}
		upload = src.built.Path
	}
	f, fi, err := new(trustfs.FS).OpenRegular("", upload) // no link, pipe or device
	if err != nil {
		src.close()
		return nil, err
	}
	src.f, src.size = f, fi.Size()
	if !v1 {
		return src, nil
	}
	info, err := splatfile.CheckFile(f, upload)
	if err == nil {
		src.format, err = v1SourceFormat(string(info.Kind))
	}
	if err != nil {
		src.close()
		return nil, err
	}
	return src, nil
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
// daemon's check step holds a job, before anything of it is read: a file
// by its size, an unbundled SOG folder (path is its meta.json) by its
// bundle's, sized from the files' stat (of the images only their headers
// are read). Outside them the error is the check step's reason. A folder
// within them is then bundled, once: the bundle is written to a temporary
// folder and hashed as it is written, so that what is looked up is what is
// uploaded, and the images are not read a second time. The build stops
// within a MiB when ctx ends.
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
	s.Path = filepath.Join(s.tmp, folderName(path))
	if s.SHA256, _, err = buildBundle(ctx, folder, s.Path, nil); err != nil {
		s.Close()
		return nil, fmt.Errorf("build the folder's bundle: %w", err)
	}
	return s, nil
}

// upload signs a URL for name and PUTs src to it, signing again when
// storage refuses the signature (expired or revoked).
func (o *OneShotOptions) upload(ctx context.Context, c *api.Client, src *source, name string) (api.Upload, error) {
	f := src.f
	var up api.Upload
	sign := func() error {
		o.Stage("sign", "")
		return o.Retry(ctx, func() error {
			var err error
			up, err = c.SignedURL(ctx, name)
			return err
		})
	}
	if err := sign(); err != nil {
		return api.Upload{}, err
	}
	o.Stage("upload", "")
	var progress func(int64)
	if o.Progress != nil {
		progress = func(sent int64) { o.Progress(sent, src.size) }
	}
	err := o.Retry(ctx, func() error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		err := c.Put(ctx, up.URL, f, src.size, progress)
		if err != nil && o.Policy.Decide(ctx, err, 1, o.Now()).Action == state.Resign {
			if serr := sign(); serr != nil {
				return serr
			}
			o.Stage("upload", "new signed URL")
		}
		return err
	})
	return up, err
}

// poll asks for the splat with get, backing off, until processing ends or
// PollTimeout passes. sp and outcome are the record the publish answered.
func (o *OneShotOptions) poll(ctx context.Context, sp Published, outcome api.Outcome, get func() (Published, api.Outcome, error)) (Published, error) {
	o.Stage("processing", sp.Status)
	deadline := o.Now().Add(o.PollTimeout)
	interval := o.PollInterval
	for {
		switch outcome {
		case api.OutcomeDone:
			return sp, nil
		case api.OutcomeFailed:
			if sp.Message == "" { // v1 records carry no message
				return sp, fmt.Errorf("%w: status %q", ErrProcessingFailed, sp.Status)
			}
			return sp, fmt.Errorf("%w: status %q: %s", ErrProcessingFailed, sp.Status, sp.Message)
		case api.OutcomeUnknown:
			o.Stage("processing", "unknown task status "+sp.Status)
		}
		if o.Now().After(deadline) {
			return sp, fmt.Errorf("processing did not finish within %s (last status %q)", o.PollTimeout, sp.Status)
		}
		select {
		case <-ctx.Done():
			return sp, ctx.Err()
		case <-o.After(interval):
		}
		interval = min(interval*2, o.PollMaxInterval)
		var next Published
		err := o.Retry(ctx, func() error {
			var err error
			next, outcome, err = get()
			return err
		})
		if err != nil {
			return sp, err // the last good record: the user keeps the splat's id and link
		}
		if next.URL == "" {
			next.URL = sp.URL // a minimal get-splat record carries no link
		}
		sp = next
	}
}

// Retry runs fn until it succeeds, the retry rule (state.Policy.Decide,
// the daemon's own) says to stop, or attempts run out. Waits go through o's
// clock. A storage refusal of a signed URL is returned as is: only the
// caller knows how to sign again (PublishFile does).
func (o *OneShotOptions) Retry(ctx context.Context, fn func() error) error {
	o.fill()
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if err == nil {
			return nil
		}
		d := o.Policy.DecideAs(state.ProfileOneShot, ctx, err, attempt, o.Now())
		switch d.Action {
		case state.Retry, state.Resign:
		case state.Stop:
			return ctx.Err()
		case state.Fail:
			if d.Reason != "" {
				return &gaveUp{reason: d.Reason, err: err} // the tries are spent: say so
			}
			return err
		default:
			return err
		}
		o.Stage("retry", fmt.Sprintf("attempt %d of %d in %.1fs: %v", attempt+1, o.Policy.PatienceOf(state.ProfileOneShot).Tries, d.Delay.Seconds(), err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.After(d.Delay):
		}
	}
}

// gaveUp is an error the retry rule stopped retrying (its Reason: the
// tries are spent), wrapping the last error so that callers still tell
// its kind (errors.As).
type gaveUp struct {
	reason string
	err    error
}

func (e *gaveUp) Error() string { return e.reason }
func (e *gaveUp) Unwrap() error { return e.err }

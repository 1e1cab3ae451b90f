package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher"
	"github.com/splatd/splatd/watcher/trustfs"
)

// DryRun is `splatd run -dry-run`: one line per file of the watch folders
// saying what a run would do with it now (state, receipt, dedupe, check,
// publish parameters), and a summary. It calls no API, reads no token and
// records nothing; it fails only when the folders or the state cannot be read.
func DryRun(ctx context.Context, cfg *config.Config, out io.Writer, log zerolog.Logger) error {
	log.Info().Strs("watch", cfg.WatchPaths()).Str("protocol", cfg.API.Protocol).
		Msg("dry run: predicting what a run would do now; no API call, nothing written")
	files, err := watcher.List(cfg.Roots(), time.Now())
	if err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	known, from, err := KnownJobs(ctx, cfg)
	if err != nil {
		return fmt.Errorf("dry run: state: %w", err)
	}
	fmt.Fprintf(out, "dry run: state %s\n\n", from)
	p := newPredictor(cfg, known)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tSIZE\tFILE\tWHY")
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		action, why, size := p.judge(ctx, f)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", action, state.HumanSize(size), state.Shown(f.Path), state.Shown(strings.Join(strings.Fields(why), " ")))
	}
	tw.Flush()
	p.summary(out)
	return nil
}

// KnownJobs returns the jobs of the state as the daemon sees them (through
// its admin socket, else from the state file; none when there is no state
// yet), and where they were read.
func KnownJobs(ctx context.Context, cfg *config.Config) ([]JobView, string, error) {
	body, live, err := Call(ctx, cfg.StateDir, http.MethodGet, "/v1/jobs")
	if err != nil {
		return nil, "", err
	}
	var views []JobView
	if live {
		return views, "read from the running daemon (" + cfg.StateDir + ")", json.Unmarshal(body, &views)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, queue.FileName)); errors.Is(err, os.ErrNotExist) {
		return nil, cfg.StateDir + " holds none yet: judged as a fresh state", nil
	}
	err = WithOfflineStore(cfg.StateDir, func(st *queue.Store) error {
		var err error
		views, err = ListViews(st, "", Live{})
		return err
	})
	return views, "read from " + cfg.StateDir + " (splatd is not running)", err
}

// The actions of a dry run's lines.
const (
	actPublish   = "publish"
	actAdopt     = "adopt"
	actDuplicate = "duplicate"
	actKnown     = "known"
	actWait      = "wait"
	actFail      = "fail"
	actSkip      = "skip"
)

// predictor judges files as the daemon's intake and workers would.
type predictor struct {
	cfg    *config.Config
	svc    after.Service
	fs     *trustfs.FS        // names cfg's watch folders
	byPath map[string]JobView // the newest job of each path
	bySHA  map[string]JobView // content the state published (or is publishing)
	seen   map[string]string  // sha256 → the file of this run that would publish it
	counts map[string]int
	bytes  int64 // of the files that would be published
}

func newPredictor(cfg *config.Config, known []JobView) *predictor {
	p := &predictor{
		cfg: cfg, svc: cfg.ReceiptService(), fs: cfg.TrustFS(),
		byPath: map[string]JobView{}, bySHA: map[string]JobView{}, seen: map[string]string{}, counts: map[string]int{},
	}
	for _, j := range known {
		if old, ok := p.byPath[j.Name()]; !ok || j.ID > old.ID {
			p.byPath[j.Name()] = j
		}
		if j.SHA256 != "" && j.DuplicateOf == 0 && j.Stage != string(state.Failed) && j.Stage != string(state.Canceled) {
			if _, ok := p.bySHA[j.SHA256]; !ok {
				p.bySHA[j.SHA256] = j
			}
		}
	}
	return p
}

// judge returns what a run would do with f, why, and the size it would
// upload (an unbundled SOG folder's: its bundle's).
func (p *predictor) judge(ctx context.Context, f watcher.Listed) (action, why string, size int64) {
	var folder *folderBundle
	if splatfile.IsSOGFolder(f.Path) {
		// Its job is the bundle the daemon builds: that is what is
		// checked, hashed, compared with the state and counted.
		minSize, maxSize := p.cfg.SizeBounds(f.Root)
		folder = bundleOf(ctx, p.fs, f.Root, f.Path, minSize, maxSize)
	}
	action, why = p.decide(ctx, f, folder)
	size = f.Size
	if folder != nil && folder.err == nil {
		size = folder.info.Size
	}
	p.counts[action]++
	if action == actPublish {
		p.bytes += size
	}
	return action, why, size
}

func (p *predictor) decide(ctx context.Context, f watcher.Listed, folder *folderBundle) (string, string) {
	if f.Skip != "" {
		return actSkip, f.Skip
	}
	if why, ok := p.known(f, folder); ok {
		return actKnown, why
	}
	// A receipt that is no evidence (another service, older content) is
	// ignored, as the daemon's intake does.
	if ev, err := after.CheckIn(ctx, p.fs, f.Root, f.Path, p.svc); err == nil && ev.Done {
		p.seen[ev.SHA256] = f.Path
		return actAdopt, fmt.Sprintf("its receipt says published (%s): recorded as done, not published again", ev.Receipt.Splat.URL)
	}
	var info splatfile.Info
	var err error
	if folder != nil {
		info, err = folder.info, folder.err
	} else {
		info, err = checkIn(p.fs, f.Root, f.Path)
	}
	if errors.Is(err, splatfile.ErrIncomplete) {
		return actWait, "incomplete (waits for the rest, up to incomplete_timeout): " + splatfile.Reason(err)
	}
	if err != nil {
		return actFail, "invalid, never uploaded: " + splatfile.Reason(err)
	}
	if folder != nil && folder.outside != "" {
		return actFail, folder.outside // as the check step, before it builds anything
	}
	sum := ""
	if folder != nil {
		sum = folder.sha256
	} else if sum, err = HashFile(ctx, p.fs, f.Root, f.Path); err != nil {
		return actFail, "cannot read: " + err.Error()
	}
	if j, ok := p.bySHA[sum]; ok {
		return actDuplicate, fmt.Sprintf("same content as job %d (%s, %s): not published again", j.ID, j.File, j.Stage)
	}
	if first, ok := p.seen[sum]; ok {
		return actDuplicate, "same content as " + first + ": published once"
	}
	if err := info.Kind.CheckLegacy(); p.cfg.API.Protocol != config.ProtocolV1 && err != nil {
		return actFail, "never uploaded: " + err.Error() // as the daemon's sign step
	}
	p.seen[sum] = f.Path
	params, err := p.cfg.ParamsFor(p.fs, content.PublishedAsIn(f.Root, f.Path), f.ModTime)
	if err != nil {
		return actFail, "publish parameters: " + err.Error()
	}
	return actPublish, publishWhy(info.Kind, params, sum)
}

// known says why f is a file the queue already has a job for, as the
// queue's enqueue decides: the same size and mtime, or a job that has not
// published yet (its worker notices a change itself).
func (p *predictor) known(f watcher.Listed, folder *folderBundle) (string, bool) {
	j, ok := p.byPath[f.Path]
	if !ok {
		return "", false
	}
	same := j.Size == f.Size && (j.ModTime.IsZero() || j.ModTime.Equal(f.ModTime))
	if folder != nil { // a folder's job holds its bundle's size and time (adopted: meta.json's)
		same = same || folder.err == nil && j.Size == folder.info.Size && j.ModTime.Equal(folder.latest)
	}
	stored := state.Stage(j.Stage)
	if same || !stored.Final() && !stored.Published() {
		return knownWhy(j), true
	}
	return "", false
}

// publishWhy is the dry run's line for a file that would be published.
func publishWhy(kind splatfile.Kind, params state.PublishParams, sum string) string {
	listed := "unlisted"
	if params.Listed {
		listed = "listed"
	}
	encoded := ""
	if content.Encodes(kind, params.Encode) {
		encoded = ", encoded to SOG before upload"
	}
	return fmt.Sprintf("%s%s, title %q, format %s, %s, sha256 %.12s", kind, encoded, params.Title, orDefault(params.Format), listed, sum)
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// knownWhy says what the state already holds for a file.
func knownWhy(j JobView) string {
	switch {
	case j.Adopted:
		return fmt.Sprintf("already recorded: job %d, adopted from its receipt (%s)", j.ID, j.URL)
	case j.DuplicateOf != 0:
		return fmt.Sprintf("already recorded: job %d, a duplicate of job %d", j.ID, j.DuplicateOf)
	case j.Stage == string(state.Done):
		return fmt.Sprintf("already published: job %d (%s)", j.ID, j.URL)
	case state.Stage(j.Stage).Final():
		return fmt.Sprintf("already recorded: job %d is %s (splatd retry %d publishes it)", j.ID, j.Stage, j.ID)
	}
	return fmt.Sprintf("in the queue: job %d is %s", j.ID, j.Stage)
}

func (p *predictor) summary(w io.Writer) {
	fmt.Fprintf(w, "\ndry run: %d file(s) would be published (%s), %d adopted from their receipts, %d duplicate(s), %d already in the state, %d invalid, %d incomplete, %d skipped by the folder's rules; nothing was sent or recorded\n",
		p.counts[actPublish], state.HumanSize(p.bytes), p.counts[actAdopt], p.counts[actDuplicate], p.counts[actKnown],
		p.counts[actFail], p.counts[actWait], p.counts[actSkip])
}

// checkIn is splatfile.Check on a file opened through its watch folder
// (trustfs: no link, pipe or device; nothing out of the folder).
func checkIn(fsys *trustfs.FS, root, path string) (splatfile.Info, error) {
	f, _, err := fsys.OpenRegular(root, path)
	if err != nil {
		return splatfile.Info{}, err
	}
	defer f.Close()
	return splatfile.CheckFile(f, path)
}

// folderBundle is an unbundled SOG folder as the daemon's check step sees
// it: its check, whether its bundle is within the watch folder's size
// bounds, and the sha256 of the bundle built from it.
type folderBundle struct {
	info    splatfile.Info // Size: the bundle's
	latest  time.Time      // the folder's newest file: the bundle's time
	outside string         // why the bundle is outside the size bounds (then not hashed)
	sha256  string
	err     error
}

// bundleOf checks the folder of meta through the watch folder root and,
// when its bundle (sized from the files' stat) is within minSize and
// maxSize (0: no bound), hashes it as the daemon would build it (nothing
// is written).
func bundleOf(ctx context.Context, fsys *trustfs.FS, root, meta string, minSize, maxSize int64) *folderBundle {
	dir, err := fsys.OpenDir(root, filepath.Dir(meta))
	if err != nil {
		return &folderBundle{err: err}
	}
	defer dir.Close()
	f, err := splatfile.CheckSOGFolderIn(dir, meta)
	if err != nil {
		return &folderBundle{info: f.Info, err: err}
	}
	b := &folderBundle{info: f.Info, latest: f.Latest}
	if b.outside = content.BundleOutsideBounds(f.Size, minSize, maxSize); b.outside != "" {
		return b
	}
	if b.sha256, err = splatfile.HashSOGBundle(ctx, f); err != nil {
		b.err = fmt.Errorf("%s: %w", meta, err)
	}
	return b
}

// HashFile is the sha256 of a file opened through its watch folder root
// ("": its own folder), as the daemon hashes it: for an unbundled SOG
// folder's meta.json, that of the bundle built from the folder.
func HashFile(ctx context.Context, fsys *trustfs.FS, root, path string) (string, error) {
	if splatfile.IsSOGFolder(path) {
		b := bundleOf(ctx, fsys, root, path, 0, 0)
		return b.sha256, b.err
	}
	f, _, err := fsys.OpenRegular(root, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return trustfs.Hash(ctx, f)
}

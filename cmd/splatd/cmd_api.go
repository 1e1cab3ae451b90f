package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// apiEnv is what the API commands share: the loaded config, the client and
// where the token came from (for "the token from X was refused").
type apiEnv struct {
	cfg    *config.Config
	client *api.Client
}

// loadAPI loads the config and builds a client. A bad config is a usage
// error (exit 2); a missing token is a failure (exit 1).
func loadAPI(c *cli, cfgPath string, obs api.Observer, log zerolog.Logger) (*apiEnv, int) {
	cfg, err := config.Load(cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return nil, exitUsage
	}
	token, err := api.LoadToken(cfg.API.TokenFile, c.getenv)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return nil, exitFailure
	}
	client, err := daemon.NewClient(cfg, buildVersion(), token, nil, obs, log)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return nil, exitFailure
	}
	return &apiEnv{cfg: cfg, client: client}, exitOK
}

// explain turns an API error into the sentence an operator needs.
func (a *apiEnv) explain(err error) string { return explainAPIError(err, a.client.Token()) }

// explainAPIError says what an API error means, and for a refused token
// where the token came from and how to replace it.
func explainAPIError(err error, tok *api.Token) string {
	var ae *api.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		return fmt.Sprintf("the API refused the token read from %s (HTTP 401: %s); check that it was not revoked and belongs to this account; %s", tok.Origin(), ae.Message, tok.Advice())
	}
	return oneLine(err.Error())
}

func cmdCheckpoints(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "checkpoints")
	cfgPath := configFlag(c, fs)
	limit := fs.Int("limit", 0, "checkpoints per request, 1..50 (the API's maximum is 50; default 20, or 50 with -all)")
	all := fs.Bool("all", false, "follow the cursor until every checkpoint is listed")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(c, fs, "want exactly one BRANCH id, got %d arguments", len(pos))
	}
	branch := pos[0]
	if isSet(fs, "limit") && (*limit < 1 || *limit > 50) {
		return usageError(c, fs, "-limit must be between 1 and 50 (the API refuses more than 50 per request), got %d", *limit)
	}
	if *limit == 0 {
		*limit = 20
		if *all {
			*limit = 50
		}
	}
	a, code := loadAPI(c, *cfgPath, nil, cliLogger(c))
	if a == nil {
		return code
	}
	list, err := a.checkpoints(ctx, branch, *limit, *all)
	var ae *api.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		fmt.Fprintf(c.stderr, "branch %s not found\n", branch)
		return exitFailure
	case err != nil:
		fmt.Fprintf(c.stderr, "checkpoints: %s\n", a.explain(err))
		return exitFailure
	}
	if *asJSON {
		return printJSON(c, list)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tUSER\tDESCRIPTION")
	for _, cp := range list {
		user := cp.User.Username
		if user == "" {
			user = cp.User.FullName
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cp.ID, rfc3339(cp.CreatedAt), user, oneLine(cp.Description))
	}
	tw.Flush()
	if len(list) == 0 {
		fmt.Fprintf(c.stderr, "branch %s has no checkpoints\n", branch)
	}
	return exitOK
}

// checkpoints lists a branch's checkpoints, newest first: one page, or
// with all every page, following the cursor.
func (a *apiEnv) checkpoints(ctx context.Context, branch string, limit int, all bool) ([]api.Checkpoint, error) {
	list := []api.Checkpoint{}
	seen := map[string]bool{}
	skip := ""
	for {
		var page api.CheckpointPage
		err := retryAPI(ctx, func() error {
			var err error
			page, err = a.client.Checkpoints(ctx, branch, limit, skip)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, cp := range page.Checkpoints {
			if !seen[cp.ID] { // a cursor that moves under us must not print twice
				seen[cp.ID] = true
				list = append(list, cp)
			}
		}
		if !all || !page.HasMore || len(page.Checkpoints) == 0 {
			return list, nil
		}
		next := page.Checkpoints[len(page.Checkpoints)-1].ID
		if next == skip {
			return nil, fmt.Errorf("the server repeated cursor %s; stopping", next)
		}
		skip = next
	}
}

// printJSON writes v indented to stdout.
func printJSON(c *cli, v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitFailure
	}
	return exitOK
}

// rfc3339 formats t in UTC, or "-" when unknown.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// retryAPI retries a read-only call under the retry rule's one-shot
// patience (state.ProfileOneShot: at most five tries). A refused signed
// URL is returned as it is: these calls sign none.
func retryAPI(ctx context.Context, fn func() error) error {
	var policy state.Policy
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		d := policy.DecideAs(state.ProfileOneShot, ctx, err, attempt, time.Now())
		switch {
		case d.Action == state.Stop:
			return ctx.Err()
		case d.Action == state.Fail && d.Reason != "":
			return &gaveUp{reason: d.Reason, err: err} // the tries are spent: say so
		case d.Action != state.Retry:
			return err
		}
		t := time.NewTimer(d.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// gaveUp is an error the retry rule stopped retrying (its reason: the
// tries are spent), wrapping the last error so that callers still tell its
// kind (errors.As).
type gaveUp struct {
	reason string
	err    error
}

func (e *gaveUp) Error() string { return e.reason }
func (e *gaveUp) Unwrap() error { return e.err }

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func cmdValidate(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "validate")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return usageError(c, fs, "name at least one FILE")
	}
	failed := 0
	for _, p := range pos {
		info, err := splatfile.Check(p)
		switch {
		case errors.Is(err, splatfile.ErrIncomplete):
			failed++
			fmt.Fprintf(c.stdout, "%s: incomplete: %s\n", state.Shown(p), oneLine(splatfile.Reason(err)))
		case errors.As(err, new(*splatfile.InvalidError)):
			failed++
			fmt.Fprintf(c.stdout, "%s: invalid: %s\n", state.Shown(p), oneLine(splatfile.Reason(err)))
		case err != nil: // not the content: the file cannot be read
			failed++
			fmt.Fprintf(c.stdout, "%s: error: %s\n", state.Shown(p), oneLine(err.Error()))
		default:
			fmt.Fprintf(c.stdout, "%s: ok: %s\n", state.Shown(p), describe(info))
		}
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}

func describe(i splatfile.Info) string {
	s := string(i.Kind)
	if i.Encoding != "" {
		s += " " + i.Encoding
	}
	if i.Vertices > 0 {
		s += fmt.Sprintf(", %d splats", i.Vertices)
	}
	return s + ", " + state.HumanSize(i.Size)
}

func cmdPublish(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "publish")
	cfgPath := configFlag(c, fs)
	force := fs.Bool("force", false, "publish even when the daemon's state or the file's receipt shows the content already published (a new splat)")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return usageError(c, fs, "name at least one FILE")
	}
	a, code := loadAPI(c, *cfgPath, nil, cliLogger(c))
	if a == nil {
		return code
	}
	var prior priorPublishes
	if !*force {
		var err error
		if prior, err = loadPriorPublishes(ctx, a.cfg); err != nil {
			fmt.Fprintf(c.stderr, "publish: cannot read the daemon's state (%v); -force publishes without looking\n", err)
			return exitFailure
		}
	}
	failed := 0
	for _, path := range pos {
		path = sogFolderMeta(path)
		if err := publishPath(ctx, c, a, prior, *force, path); err != nil {
			failed++
			fmt.Fprintf(c.stderr, "%s: failed: %s\n", state.Shown(path), oneLine(err.Error()))
		}
		if ctx.Err() != nil {
			return exitFailure
		}
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}

// publishPath publishes one path of `splatd publish`. The path is first
// held to the size bounds of the watch entry whose folder holds it (the
// default bound outside every watch folder), as the daemon holds a file it
// found, before anything of it is hashed or read; an unbundled SOG folder
// within them is bundled then, once, for the lookup and the upload. Unless
// force, a publish known from prior ends it.
func publishPath(ctx context.Context, c *cli, a *apiEnv, prior priorPublishes, force bool, path string) error {
	minSize, maxSize := a.cfg.SizeBoundsOf(path)
	src, err := content.PrepareOneShot(ctx, path, minSize, maxSize)
	if errors.Is(err, splatfile.ErrIncomplete) || errors.As(err, new(*splatfile.InvalidError)) {
		return fmt.Errorf("not publishable: %s", oneLine(splatfile.Reason(err))) // a folder's check
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if !force {
		where, url, err := prior.find(ctx, path, src.SHA256)
		if err != nil {
			return err
		}
		if where != "" {
			fmt.Fprintf(c.stderr, "%s: already published as %s (%s): not published again; -force publishes it anyway\n", state.Shown(path), url, state.Shown(where))
			fmt.Fprintf(c.stdout, "%s\t%s\n", state.Shown(path), url)
			return nil
		}
	}
	return publishOne(ctx, c, a, path, src)
}

// sogFolderMeta names an unbundled SOG folder given by its own path by its
// meta.json, as the daemon's job does; any other path is itself.
func sogFolderMeta(path string) string {
	meta := filepath.Join(path, splatfile.SOGMeta)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		if _, err := os.Lstat(meta); err == nil {
			return meta
		}
	}
	return path
}

// publishOne publishes path, whose upload src is (PrepareOneShot).
func publishOne(ctx context.Context, c *cli, a *apiEnv, path string, src *content.OneShot) error {
	v1 := a.cfg.API.Protocol == config.ProtocolV1
	info := src.Info // a folder's, checked as it was bundled
	if !splatfile.IsSOGFolder(path) {
		var err error
		if info, err = splatfile.Check(path); err != nil {
			return fmt.Errorf("not publishable: %s", oneLine(splatfile.Reason(err)))
		}
	}
	if err := info.Kind.CheckLegacy(); !v1 && err != nil {
		return fmt.Errorf("not publishable: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	// A file inside a watched folder gets that folder's settings, as the
	// daemon would give it.
	as := content.PublishedAs(path)
	if w, ok := a.cfg.WatchOf(path); ok {
		if abs, err := filepath.Abs(path); err == nil {
			as = content.PublishedAsIn(w.Path, abs)
		}
	}
	req, err := a.cfg.ParamsFor(a.cfg.TrustFS(), as, fi.ModTime())
	if err != nil {
		return err
	}
	o := daemon.PoolOptions(a.cfg, a.client)
	o.Files = resolvedParams{params: req, fs: o.Files.FS()}
	o.Logger = zerolog.Nop() // the progress lines tell what the pool's log would
	bar := newProgress(c.stderr, filepath.Base(as))
	j, err := uploader.PublishOne(ctx, o, src.Path, uploader.OneShot{Stage: bar.stage, Progress: bar.update})
	bar.done()
	if err != nil {
		if j.ViewerURL != "" {
			return fmt.Errorf("%s (splat %s, %s)", a.explain(err), j.SplatID, j.ViewerURL)
		}
		return errors.New(a.explain(err))
	}
	fmt.Fprintf(c.stdout, "%s\t%s\n", state.Shown(path), j.ViewerURL)
	return nil
}

// resolvedParams is `splatd publish`'s uploader.Files: the file's
// parameters, resolved before the run, and the config's trust boundary; no
// links followed, no size bounds.
type resolvedParams struct {
	params state.PublishParams
	fs     *trustfs.FS
}

func (r resolvedParams) FS() *trustfs.FS { return r.fs }
func (r resolvedParams) Params(string, string, time.Time) (state.PublishParams, error) {
	return r.params, nil
}
func (resolvedParams) FollowSymlinks(string) bool       { return false }
func (resolvedParams) SizeBounds(string) (int64, int64) { return 0, 0 }

// progress draws a bar on a terminal and plain lines elsewhere (journald,
// CI logs), so that neither gets a screen of carriage returns.
type progress struct {
	w        io.Writer
	name     string
	tty      bool
	start    time.Time
	lastPct  int
	lastDraw time.Time
	drawn    bool
}

func newProgress(w io.Writer, name string) *progress {
	return &progress{w: w, name: name, tty: isTerminal(w), start: time.Now(), lastPct: -1}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) stage(step, detail string) {
	if p.drawn && p.tty {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	if step == "upload" && detail == "" {
		p.start = time.Now()
	}
	if detail != "" {
		fmt.Fprintf(p.w, "%s: %s (%s)\n", p.name, step, detail)
	} else {
		fmt.Fprintf(p.w, "%s: %s\n", p.name, step)
	}
}

func (p *progress) update(sent, size int64) {
	pct := 100
	if size > 0 {
		pct = int(sent * 100 / size)
	}
	now := time.Now()
	rate := float64(sent) / max(now.Sub(p.start).Seconds(), 0.001)
	if p.tty {
		if now.Sub(p.lastDraw) < 100*time.Millisecond && sent != size {
			return
		}
		p.lastDraw = now
		const width = 30
		fill := pct * width / 100
		fmt.Fprintf(p.w, "\r  [%s%s] %3d%% %s/%s %s/s ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
			pct, state.HumanSize(sent), state.HumanSize(size), state.HumanSize(int64(rate)))
		p.drawn = true
		return
	}
	if pct/25 > p.lastPct/25 || (p.lastPct < 0) {
		p.lastPct = pct
		fmt.Fprintf(p.w, "%s: uploaded %d%% (%s of %s, %s/s)\n", p.name, pct, state.HumanSize(sent), state.HumanSize(size), state.HumanSize(int64(rate)))
	}
}

func (p *progress) done() {
	if p.drawn && p.tty {
		fmt.Fprintln(p.w)
	}
}

// cliLogger logs warnings and errors of the one-shot commands to stderr in
// console form; the daemon configures its own.
func cliLogger(c *cli) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: c.stderr, NoColor: true}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}

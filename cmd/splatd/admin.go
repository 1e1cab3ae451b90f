package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
)

// adminSocketName is the unix socket in state_dir that `splatd jobs` and
// `splatd retry` talk to. Mode 0600: only the daemon's user may use it.
const adminSocketName = "splatd.sock"

// jobView is a job as the CLI shows it: no signed URL, no settings.
type jobView struct {
	ID          uint64     `json:"id"`
	File        string     `json:"file"`
	Stage       string     `json:"stage"`
	Attempts    int        `json:"attempts"`
	Size        int64      `json:"size"`
	ModTime     time.Time  `json:"mod_time,omitzero"`
	SHA256      string     `json:"sha256,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// StoredStage is the stage in the state when Stage shows the work in
	// progress instead ("uploading" for a signed job whose bytes are going
	// out).
	StoredStage string `json:"stored_stage,omitempty"`
	// Sent, Rate and ETA describe a running upload: bytes sent, recent
	// bytes per second, seconds left at that rate (absent: unknown).
	Sent        int64   `json:"sent,omitempty"`
	Rate        float64 `json:"rate_bytes_per_second,omitempty"`
	ETA         float64 `json:"eta_s,omitempty"`
	SplatID     string  `json:"splat_id,omitempty"`
	URL         string  `json:"url,omitempty"`
	Error       string  `json:"error,omitempty"`
	DuplicateOf uint64  `json:"duplicate_of,omitempty"`
	// Adopted: recorded as done from its receipt, not published by this
	// state directory.
	Adopted bool `json:"adopted,omitempty"`
	// Parked: why the job waits on another daemon of a fleet, holding no
	// worker (next_attempt says when it is looked at again).
	Parked string `json:"parked,omitempty"`
	// AfterAction and AfterError: the after-action (receipt, move, delete)
	// of a final job keeps failing; AfterRetry is its next attempt.
	AfterAction string     `json:"after_action,omitempty"`
	AfterError  string     `json:"after_error,omitempty"`
	AfterRetry  *time.Time `json:"after_retry,omitempty"`
}

// stageUploading is the stage a job shows while its bytes go out: stored
// as signed, it is doing the work of an upload.
const stageUploading = "uploading"

func viewOf(j state.Job, prog *uploader.Progress) jobView {
	v := jobView{
		ID: j.ID, File: j.Path, Stage: string(j.Stage), Attempts: j.Attempts, Size: j.Size, ModTime: j.ModTime, SHA256: j.SHA256,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, SplatID: j.SplatID, URL: j.ViewerURL,
		DuplicateOf: j.DuplicateOf, Adopted: j.Adopted, Parked: j.Parked,
		AfterAction: j.AfterAction, AfterError: j.AfterError,
	}
	if j.AfterError != "" && !j.AfterRetry.IsZero() {
		t := j.AfterRetry
		v.AfterRetry = &t
	}
	if !j.Stage.Final() && !j.NextAttempt.IsZero() {
		t := j.NextAttempt
		v.NextAttempt = &t
	}
	if prog != nil && !j.Stage.Final() {
		v.Stage, v.StoredStage = stageUploading, string(j.Stage)
		v.Sent, v.Rate = prog.Sent, prog.Rate
		v.ETA = prog.ETA.Round(time.Second).Seconds()
		v.NextAttempt = nil
	}
	switch {
	case j.FailReason != "":
		v.Error = j.FailReason
	case j.LastError != "":
		// The content check's errors start with the path, which the FILE
		// column already shows.
		v.Error = strings.TrimPrefix(j.LastError, j.Path+": ")
	}
	return v
}

// jobSource is what the admin endpoints read: the live daemon, or the state
// file opened directly when no daemon runs.
type jobSource interface {
	List(queue.Filter) ([]state.Job, error)
	Retry(id uint64) (state.Job, error)
	RetryFailed() (int, error)
	Resolve(id uint64, splatID string) (state.Job, error)
}

type adminServer struct {
	path string
	ln   net.Listener
	srv  *http.Server
	log  zerolog.Logger
}

// newAdminServer listens on the socket. A socket file left by a crashed
// daemon is stale (this process holds the state lock), so it is replaced.
func newAdminServer(path string, d *daemon, log zerolog.Logger) (*adminServer, error) {
	if !adminSocket {
		log.Info().Msg("no admin socket on this platform: jobs, retry and resolve read the state file while the daemon is stopped")
		return &adminServer{log: log}, nil
	}
	_ = os.Remove(path)
	ln, err := listenAdmin(path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		views, err := listViews(d.store, r.URL.Query().Get("stage"), d.pool.Progress())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for i := range views {
			views[i].URL = d.cfg.TrustedViewerURL(views[i].URL)
		}
		writeJSON(w, views)
	})
	mux.HandleFunc("POST /v1/retry", func(w http.ResponseWriter, r *http.Request) {
		n, err := doRetry(d.store, r.URL.Query().Get("id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.pool.Wake()
		writeJSON(w, map[string]int{"retried": n})
	})
	mux.HandleFunc("POST /v1/adopt", func(w http.ResponseWriter, r *http.Request) {
		rep, err := adoptDir(r.Context(), d.store, d.cfg, r.URL.Query().Get("dir"), r.URL.Query().Get("dry_run") == "1")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("POST /v1/resolve", func(w http.ResponseWriter, r *http.Request) {
		n, err := doResolve(d.store, r.URL.Query().Get("id"), r.URL.Query().Get("splat"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.pool.Wake()
		writeJSON(w, map[string]int{"resolved": n})
	})
	mux.HandleFunc("POST /v1/reload", d.adminReload)
	mux.HandleFunc("POST /v1/{op}", d.adminControl) // cancel, republish, forget
	return &adminServer{path: path, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, log: log}, nil
}

// close releases the socket when run will not be called (the daemon failed
// to start after binding it).
func (a *adminServer) close() {
	_ = a.ln.Close()
	_ = os.Remove(a.path)
}

func (a *adminServer) run(ctx context.Context) error {
	if a.ln == nil {
		return nil // no admin socket on this platform
	}
	errc := make(chan error, 1)
	go func() { errc <- a.srv.Serve(a.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin socket: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(sctx)
	_ = os.Remove(a.path)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// listViews lists the jobs in the given stages (comma-separated; empty:
// all), "uploading" selecting the jobs whose upload is running.
func listViews(src jobSource, stage string, progress map[uint64]uploader.Progress) ([]jobView, error) {
	var f queue.Filter
	var uploading, stored bool
	for _, s := range strings.Split(stage, ",") {
		switch s = strings.TrimSpace(s); {
		case s == "":
		case s == stageUploading:
			uploading = true
		case state.Stage(s).Valid():
			stored = true
			f.Stages = append(f.Stages, state.Stage(s))
		default:
			return nil, fmt.Errorf("unknown stage %q (stages: %s)", s, stageNames())
		}
	}
	if uploading && !stored {
		f.Stages = []state.Stage{state.Signed}
	}
	jobs, err := src.List(f)
	if err != nil {
		return nil, err
	}
	views := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		var prog *uploader.Progress
		if p, ok := progress[j.ID]; ok {
			prog = &p
		}
		v := viewOf(j, prog)
		if uploading && !stored && v.Stage != stageUploading {
			continue
		}
		views = append(views, v)
	}
	return views, nil
}

// stageNames lists the stages a -state filter takes.
func stageNames() string {
	names := make([]string, 0, len(state.Stages)+1)
	for _, s := range state.Stages {
		names = append(names, string(s))
		if s == state.Signed {
			names = append(names, stageUploading)
		}
	}
	return strings.Join(names, ", ")
}

// doRetry re-queues one job ("ID") or every failed job ("failed").
func doRetry(src jobSource, id string) (int, error) {
	if id == "failed" {
		return src.RetryFailed()
	}
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("job id %q is not a number", id)
	}
	if _, err := src.Retry(n); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return 0, fmt.Errorf("no job %d", n)
		}
		return 0, err
	}
	return 1, nil
}

// doResolve closes held job id with the splat the operator found.
func doResolve(src jobSource, id, splat string) (int, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("job id %q is not a number", id)
	}
	if _, err := src.Resolve(n, splat); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return 0, fmt.Errorf("no job %d", n)
		}
		return 0, err
	}
	return 1, nil
}

// adminCall talks to the daemon through its socket. ok is false when no
// daemon listens there (the caller then opens the state file directly).
func adminCall(ctx context.Context, stateDir, method, path string) (body []byte, ok bool, err error) {
	return adminCallTimeout(ctx, stateDir, method, path, 30*time.Second)
}

// adminCallTimeout is adminCall with its own time limit (0: ctx only), for
// calls that hash files (adopt).
func adminCallTimeout(ctx context.Context, stateDir, method, path string, timeout time.Duration) (body []byte, ok bool, err error) {
	if !adminSocket {
		return nil, false, nil
	}
	sock := filepath.Join(stateDir, adminSocketName)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, method, "http://splatd"+path, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, false, nil
		}
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) {
			return nil, true, fmt.Errorf("%s: permission denied: run as the daemon's user (e.g. sudo -u splatd)", sock)
		}
		return nil, true, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, true, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, true, errors.New(strings.TrimSpace(string(b)))
	}
	return b, true, nil
}

// withOfflineStore opens the state file when no daemon runs. The lock
// makes this safe: if a daemon starts meanwhile, one of the two waits.
func withOfflineStore(stateDir string, fn func(*queue.Store) error) error {
	if _, err := os.Stat(filepath.Join(stateDir)); err != nil {
		return fmt.Errorf("state_dir %s: %w", stateDir, err)
	}
	st, err := queue.Open(stateDir, queue.Options{})
	if err != nil {
		if errors.Is(err, queue.ErrLocked) {
			if !adminSocket {
				return fmt.Errorf("a splatd holds %s, and on this platform it has no admin socket: stop it first", stateDir)
			}
			return fmt.Errorf("a splatd holds %s but its admin socket does not answer", stateDir)
		}
		return err
	}
	defer st.Close()
	return fn(st)
}

func cmdRetry(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "retry")
	cfgPath := configFlag(c, fs)
	failed := fs.Bool("failed", false, "re-queue every failed job")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	var target string
	switch {
	case *failed && len(pos) == 0:
		target = "failed"
	case !*failed && len(pos) == 1:
		if _, err := strconv.ParseUint(pos[0], 10, 64); err != nil {
			return usageError(c, fs, "job id %q is not a number (see splatd jobs)", pos[0])
		}
		target = pos[0]
	default:
		return usageError(c, fs, "give one job ID or -failed")
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	var n int
	body, live, err := adminCall(ctx, cfg.StateDir, http.MethodPost, "/v1/retry?id="+target)
	if err == nil && live {
		var out map[string]int
		err = json.Unmarshal(body, &out)
		n = out["retried"]
	}
	if err == nil && !live {
		err = withOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			var err error
			n, err = doRetry(st, target)
			return err
		})
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "retry: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "re-queued %d job(s)\n", n)
	return exitOK
}

func cmdResolve(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "resolve")
	cfgPath := configFlag(c, fs)
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(c, fs, "give the held job's ID and the SPLAT_ID you found on the account")
	}
	if _, err := strconv.ParseUint(pos[0], 10, 64); err != nil {
		return usageError(c, fs, "job id %q is not a number (see splatd jobs -state held)", pos[0])
	}
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	q := url.Values{"id": {pos[0]}, "splat": {pos[1]}}
	_, live, err := adminCall(ctx, cfg.StateDir, http.MethodPost, "/v1/resolve?"+q.Encode())
	if err == nil && !live {
		err = withOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			_, err := doResolve(st, pos[0], pos[1])
			return err
		})
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "resolve: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "job %s: polling splat %s to done (no new publish)\n", pos[0], pos[1])
	return exitOK
}

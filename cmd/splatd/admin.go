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
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

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
	SHA256      string     `json:"sha256,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	Sent        int64      `json:"sent,omitempty"` // bytes of a running upload
	SplatID     string     `json:"splat_id,omitempty"`
	URL         string     `json:"url,omitempty"`
	Error       string     `json:"error,omitempty"`
	DuplicateOf uint64     `json:"duplicate_of,omitempty"`
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

func viewOf(j state.Job, sent int64) jobView {
	v := jobView{
		ID: j.ID, File: j.Path, Stage: string(j.Stage), Attempts: j.Attempts, Size: j.Size, SHA256: j.SHA256,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Sent: sent, SplatID: j.SplatID, URL: j.ViewerURL,
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

func listViews(src jobSource, stage string, progress map[uint64]uploader.Progress) ([]jobView, error) {
	var f queue.Filter
	if stage != "" {
		for _, s := range strings.Split(stage, ",") {
			st := state.Stage(strings.TrimSpace(s))
			if !st.Valid() {
				return nil, fmt.Errorf("unknown stage %q (stages: %s)", s, stageNames())
			}
			f.Stages = append(f.Stages, st)
		}
	}
	jobs, err := src.List(f)
	if err != nil {
		return nil, err
	}
	views := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		views = append(views, viewOf(j, progress[j.ID].Sent))
	}
	return views, nil
}

func stageNames() string {
	names := make([]string, len(state.Stages))
	for i, s := range state.Stages {
		names[i] = string(s)
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

func cmdJobs(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "jobs")
	cfgPath := configFlag(c, fs)
	stage := fs.String("state", "", "only jobs in these stages, comma-separated ("+stageNames()+")")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	for _, s := range strings.Split(*stage, ",") {
		if s = strings.TrimSpace(s); s != "" && !state.Stage(s).Valid() {
			return usageError(c, fs, "unknown stage %q (stages: %s)", s, stageNames())
		}
	}
	cfg, err := loadConfig(*cfgPath, false)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	var views []jobView
	body, live, err := adminCall(ctx, cfg.StateDir, http.MethodGet, "/v1/jobs?stage="+*stage)
	if err == nil && live {
		err = json.Unmarshal(body, &views)
	}
	if err == nil && !live {
		err = withOfflineStore(cfg.StateDir, func(st *queue.Store) error {
			var err error
			views, err = listViews(st, *stage, nil)
			return err
		})
		if err == nil {
			fmt.Fprintf(c.stderr, "(splatd is not running; read %s directly)\n", cfg.StateDir)
		}
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "jobs: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if views == nil {
			views = []jobView{}
		}
		_ = enc.Encode(views)
		return exitOK
	}
	printJobs(c.stdout, views, time.Now())
	return exitOK
}

func printJobs(w io.Writer, views []jobView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTAGE\tATTEMPTS\tAGE\tPROGRESS\tFILE\tRESULT")
	for _, v := range views {
		prog := "-"
		if v.Sent > 0 && v.Size > 0 {
			prog = fmt.Sprintf("%d%%", v.Sent*100/v.Size)
		}
		result := v.URL
		if v.Error != "" {
			result = oneLine(v.Error)
		}
		if v.DuplicateOf != 0 {
			result = fmt.Sprintf("duplicate of job %d", v.DuplicateOf)
		}
		if v.Adopted {
			result = "adopted from its receipt: " + v.URL
		}
		if v.Parked != "" {
			result = "PARKED: " + v.Parked
		}
		if v.AfterError != "" {
			result = fmt.Sprintf("AFTER-ACTION %s FAILED (retried): %s", strings.ToUpper(v.AfterAction), oneLine(v.AfterError))
		}
		if len(result) > 100 {
			result = result[:97] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.Stage, v.Attempts, age(now.Sub(v.CreatedAt)), prog, v.File, result)
	}
	tw.Flush()
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
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
	cfg, err := loadConfig(*cfgPath, false)
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
	cfg, err := loadConfig(*cfgPath, false)
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

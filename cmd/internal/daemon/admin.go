package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// SocketName is the unix socket in state_dir that `splatd jobs` and
// `splatd retry` talk to. Mode 0600: only the daemon's user may use it.
const SocketName = "splatd.sock"

// JobSource is what the admin endpoints read: the live daemon, or the state
// file opened directly when no daemon runs.
type JobSource interface {
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
// Daemon is stale (this process holds the state lock), so it is replaced.
func newAdminServer(path string, d *Daemon, log zerolog.Logger) (*adminServer, error) {
	if !HasSocket {
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
		views, err := ListViews(d.store, r.URL.Query().Get("stage"), LiveOf(d.pool))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for i := range views {
			views[i].URL = shownViewerURL(d.cfg, views[i].URL, views[i].Adopted)
		}
		writeJSON(w, views)
	})
	mux.HandleFunc("POST /v1/retry", func(w http.ResponseWriter, r *http.Request) {
		res, err := d.act(r.Context(), "retry", r.URL.Query().Get("id"), viaSocket)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{"retried": res.N, "hints": res.Hints})
	})
	mux.HandleFunc("POST /v1/adopt", func(w http.ResponseWriter, r *http.Request) {
		rep, err := AdoptDir(r.Context(), d.store, d.config(), r.URL.Query().Get("dir"), r.URL.Query().Get("dry_run") == "1")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("POST /v1/resolve", func(w http.ResponseWriter, r *http.Request) {
		n, err := Resolve(d.store, r.URL.Query().Get("id"), r.URL.Query().Get("splat"))
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

// Retry re-queues one job ("ID") or every failed job ("failed").
func Retry(src JobSource, id string) (int, error) {
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

// RetryHints warns, before a retry of id ("ID" or "failed"), of the jobs
// that failed on their file's content: retried unchanged, they fail again.
func RetryHints(src JobSource, id string) []string {
	jobs, err := src.List(queue.Filter{Stages: []state.Stage{state.Failed}})
	if err != nil {
		return nil
	}
	var hints []string
	for _, j := range jobs {
		if id != "failed" && strconv.FormatUint(j.ID, 10) != id {
			continue
		}
		if j.Stage == state.Failed && strings.HasPrefix(j.FailReason, invalidPrefix) {
			hints = append(hints, fmt.Sprintf("job %d (%s) failed on its file (%s): it will fail again unless the file changed",
				j.ID, state.Shown(j.Path), strings.TrimPrefix(j.FailReason, invalidPrefix)))
		}
	}
	return hints
}

// invalidPrefix begins the reason of a job whose file failed the content
// check (the uploader's failReason).
const invalidPrefix = "invalid file: "

// Resolve closes held job id with the splat the operator found.
func Resolve(src JobSource, id, splat string) (int, error) {
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

// Call talks to the daemon through its socket. ok is false when no
// daemon listens there (the caller then opens the state file directly).
func Call(ctx context.Context, stateDir, method, path string) (body []byte, ok bool, err error) {
	return CallTimeout(ctx, stateDir, method, path, 30*time.Second)
}

// CallTimeout is Call with its own time limit (0: ctx only), for
// calls that hash files (adopt).
func CallTimeout(ctx context.Context, stateDir, method, path string, timeout time.Duration) (body []byte, ok bool, err error) {
	if !HasSocket {
		return nil, false, nil
	}
	sock := filepath.Join(stateDir, SocketName)
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

// WithOfflineStore opens the state file when no daemon runs. The lock
// makes this safe: if a daemon starts meanwhile, one of the two waits.
func WithOfflineStore(stateDir string, fn func(*queue.Store) error) error {
	if _, err := os.Stat(filepath.Join(stateDir)); err != nil {
		return fmt.Errorf("state_dir %s: %w", stateDir, err)
	}
	st, err := queue.Open(stateDir, queue.Options{})
	if err != nil {
		if errors.Is(err, queue.ErrLocked) {
			if !HasSocket {
				return fmt.Errorf("a splatd holds %s, and on this platform it has no admin socket: stop it first", stateDir)
			}
			return fmt.Errorf("a splatd holds %s but its admin socket does not answer", stateDir)
		}
		return err
	}
	defer st.Close()
	return fn(st)
}

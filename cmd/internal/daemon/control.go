package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// The operator's controls of single jobs: cancel, republish, forget. Each
// goes through the admin socket when a daemon runs (so that it can act on
// it at once: a receipt, a wake-up, a rescan) and opens the state file
// directly when none does, like retry and resolve.

// ControlOp is one of the control commands (cancel, republish, forget).
type ControlOp struct {
	name string
	// apply changes the job in the store and returns it as it now is (as
	// it was, for forget).
	apply func(fsys *trustfs.FS, st *queue.Store, j state.Job) (state.Job, error)
	// done says what happened, for the command's output.
	done func(j state.Job) string
}

// ControlOps are the control commands by name, for the admin socket and
// the CLI (which applies them to the state file while no daemon runs).
var ControlOps = map[string]ControlOp{
	"cancel": {
		name:  "cancel",
		apply: func(fsys *trustfs.FS, st *queue.Store, j state.Job) (state.Job, error) { return st.Cancel(j.ID) },
		done: func(j state.Job) string {
			return fmt.Sprintf("job %d canceled (%s): not published, not a failure; splatd retry %d starts it again", j.ID, j.Path, j.ID)
		},
	},
	"republish": {
		name: "republish",
		apply: func(fsys *trustfs.FS, st *queue.Store, j state.Job) (state.Job, error) {
			if _, err := fsys.Lstat(j.Root, j.Path); errors.Is(err, fs.ErrNotExist) {
				return j, fmt.Errorf("job %d: %s is gone (moved or deleted by after.on_success?): put it back there, or publish it with splatd publish", j.ID, j.Path)
			}
			return st.Republish(j.ID)
		},
		done: func(j state.Job) string {
			return fmt.Sprintf("job %d (%s) queued to be published again (generation %d)", j.ID, j.Path, j.Generation)
		},
	},
	"forget": {
		name: "forget",
		apply: func(fsys *trustfs.FS, st *queue.Store, j state.Job) (state.Job, error) {
			j, err := st.Forget(j.ID)
			if err != nil {
				return j, err
			}
			// The receipt the job left beside the file would have it
			// adopted back at once (published, same content).
			if _, err := after.RemoveOwnReceipt(fsys, j.Root, j.Path, j.ID, j.SHA256); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return j, fmt.Errorf("job %d forgotten, but its receipt stays (the file will be adopted back from it): %w", j.ID, err)
			}
			return j, nil
		},
		done: func(j state.Job) string {
			if j.Path == "" {
				return fmt.Sprintf("job %d forgotten", j.ID)
			}
			return fmt.Sprintf("job %d forgotten: %s is found again as a new file (the receipt the job left beside it is removed), and its content may be published again", j.ID, state.Shown(j.Path))
		},
	},
}

// FindJob resolves ID|PATH to a job: a number is a job id, anything else a
// file path (the latest job for it). An unbundled SOG folder's job is its
// meta.json's, and is found by the folder's own path too, or by the name it
// is published as (FOLDER.sog beside it), as an operator names it.
func FindJob(st *queue.Store, ref string) (state.Job, error) {
	if id, err := strconv.ParseUint(ref, 10, 64); err == nil {
		j, err := st.Get(id)
		if errors.Is(err, queue.ErrNotFound) {
			return j, fmt.Errorf("no job %d (see splatd jobs)", id)
		}
		return j, err
	}
	abs, err := filepath.Abs(ref)
	if err != nil {
		return state.Job{}, err
	}
	j, err := st.JobByPath(abs)
	if errors.Is(err, queue.ErrNotFound) && !splatfile.IsSOGFolder(abs) {
		j, err = st.JobByPath(filepath.Join(abs, splatfile.SOGMeta)) // the folder
	}
	if errors.Is(err, queue.ErrNotFound) && strings.HasSuffix(abs, ".sog") {
		j, err = st.JobByPath(filepath.Join(strings.TrimSuffix(abs, ".sog"), splatfile.SOGMeta)) // FOLDER.sog
	}
	if errors.Is(err, queue.ErrNotFound) {
		return j, fmt.Errorf("no job for %s (see splatd jobs)", abs)
	}
	return j, err
}

// Control applies op to the job ref names. A job whose stored record
// cannot be read can only be forgotten: forget is what its error advises.
// The job's file and receipt are looked at through fsys.
func Control(fsys *trustfs.FS, st *queue.Store, op ControlOp, ref string) (state.Job, error) {
	j, err := FindJob(st, ref)
	var ue *queue.UnreadableError
	if op.name == "forget" && errors.As(err, &ue) {
		j, err = state.Job{ID: ue.ID}, nil
	}
	if err != nil {
		return j, err
	}
	return op.apply(fsys, st, j)
}

// adminControl is the admin socket's POST /v1/{cancel,republish,forget}
// (act does the daemon's part).
func (d *Daemon) adminControl(w http.ResponseWriter, r *http.Request) {
	if _, ok := ControlOps[r.PathValue("op")]; !ok {
		http.NotFound(w, r)
		return
	}
	res, err := d.act(r.Context(), r.PathValue("op"), r.URL.Query().Get("ref"), viaSocket)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, res.Job)
}

// Done says what op did to j, for the command's output.
func (op ControlOp) Done(j state.Job) string { return op.done(j) }

package metrics

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/splatd/splatd/state"
)

// The page's actions (retry, cancel, republish, forget) are guarded as
// Syncthing guards its GUI: each POST carries the key the daemon keeps in
// its state directory (X-API-Key, typed into the page once) and the page's
// CSRF token (X-CSRF-Token), comes from this page's own Origin, and from a
// loopback address unless status.remote_actions allows others. Every action
// and every refusal is logged with the remote address.

// ActionOps are the actions the page offers.
var ActionOps = []string{"retry", "cancel", "republish", "forget"}

// Action is an operator's request from the status page.
type Action struct {
	Op  string // one of ActionOps
	Job uint64
	// From says where it came from: "status page (127.0.0.1:51234)".
	From string
}

// ActionKeyName is the file in the state directory that holds the key.
const ActionKeyName = "status-key"

// ActionKey returns the key kept in path, writing a new random one (mode
// 0600) when the file does not exist or holds no key (a power cut can leave
// it empty): written to a temporary file, fsynced, renamed into place and
// its folder fsynced.
func ActionKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("status page key: %w", err)
	}
	if key := strings.TrimSpace(string(b)); err == nil && len(key) >= 16 {
		return key, nil
	}
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	key := hex.EncodeToString(raw)
	if err := writeKey(path, key+"\n"); err != nil {
		return "", fmt.Errorf("status page key: %w", err)
	}
	return key, nil
}

// writeKey replaces path with data durably.
func writeKey(path, data string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newCSRF() string {
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}

// sameSecret compares got with want in time independent of where they
// differ, and of want's length.
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return want != "" && subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// action is POST /api/jobs/{id}/{op}, behind guard (the Host or bearer
// rule of every status endpoint).
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	log := s.opts.Logger.With().Str("remote", r.RemoteAddr).Str("op", r.PathValue("op")).Str("job", r.PathValue("id")).Logger()
	refuse := func(code int, msg string) {
		log.Warn().Str("origin", r.Header.Get("Origin")).Str("reason", msg).Msg("status page action refused")
		writeJSONError(w, code, "refused: "+msg)
	}
	if !s.opts.RemoteActions && !remoteLoopback(r.RemoteAddr) {
		refuse(http.StatusForbidden, "actions answer only requests from this machine (status.remote_actions is false)")
		return
	}
	if origin := r.Header.Get("Origin"); origin != "http://"+r.Host {
		refuse(http.StatusForbidden, fmt.Sprintf("the request comes from another page (Origin %q, not http://%s)", origin, r.Host))
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		refuse(http.StatusForbidden, "the request comes from another site (Sec-Fetch-Site: "+site+")")
		return
	}
	if !sameSecret(r.Header.Get("X-CSRF-Token"), s.csrf) {
		refuse(http.StatusForbidden, "no valid CSRF token: reload the page")
		return
	}
	if !sameSecret(strings.TrimSpace(r.Header.Get("X-API-Key")), s.opts.ActionKey) {
		refuse(http.StatusForbidden, "no key, or not the daemon's: enter the key from "+s.opts.ActionKeyFile+" under \"actions key\" at the top of the page")
		return
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	op := r.PathValue("op")
	if err != nil || !validOp(op) {
		writeJSONError(w, http.StatusNotFound, "no such action: POST /api/jobs/ID/{"+strings.Join(ActionOps, ",")+"}")
		return
	}
	msg, err := s.opts.Act(r.Context(), Action{Op: op, Job: id, From: "status page (" + r.RemoteAddr + ")"})
	if err != nil {
		writeJSONError(w, http.StatusConflict, state.ScrubText(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": msg})
}

func validOp(op string) bool {
	for _, o := range ActionOps {
		if o == op {
			return true
		}
	}
	return false
}

// remoteLoopback reports whether a request's remote address is this
// machine's loopback.
func remoteLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// actionsFor lists the actions the page offers a job in stage.
func actionsFor(stage string) []string {
	switch stage {
	case "done":
		return []string{"republish", "forget"}
	case "failed", "held", "canceled":
		return []string{"retry", "forget"}
	case "":
		return nil
	}
	return []string{"cancel"}
}

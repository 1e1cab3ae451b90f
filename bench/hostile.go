package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// The hostile-folder scenario (bench/README.md, hostile-folder): a folder
// writer's attacks on a running daemon, once per protocol. Its verdict line:
//
//	attacks N, outside files read R, outside files changed C, daemon restarts D, stop within grace yes|no
//
// and any count above zero, or a miss that README lists, misses the target.

// hostileMemLimit bounds the daemon's address space in this scenario: an
// unbounded read (a /dev/zero sidecar, a template that writes gigabytes)
// kills it quickly instead of taking the shared machine's memory.
const hostileMemLimit = 2 << 30

// hostileRestartLimit is systemd's StartLimitBurst in the unit: after this
// many deaths the service stays failed.
const hostileRestartLimit = 5

// hostileGrace is how long SIGTERM may take: the daemon's own grace (20 s)
// and a margin, well inside the unit's TimeoutStopSec=90.
const hostileGrace = 30 * time.Second

// hostileRound is one protocol's run: its folders, outside files and counts.
type hostileRound struct {
	e                 *tenv
	proto             string
	root, outside     string
	inMove, inDel     string
	done, failed      string
	stateDir, cfgPath string
	sim               *apisim.Server
	d                 *Daemon
	markers           map[string]string // outside path → its unique marker
	outSHAs           map[string]string // outside path → sha256
	before            map[string]fileSig
	unmount           func()
	attacks           int
	restarts          int
	stopOK            bool
	hookMu            sync.Mutex
	hookHits          int      // requests that reached the redirect's target
	referers          []string // Referer headers the webhook sent
}

type fileSig struct {
	mode  fs.FileMode
	size  int64
	mtime time.Time
	sha   string
}

func runHostileFolder(ctx context.Context, e *tenv) error {
	if os.Getuid() != 0 {
		e.note("not root: the failure folder shares the watch folder's filesystem (no tmpfs mount)")
	}
	var read, changed, restarts, attacks int
	stopOK := true
	for _, proto := range []string{"legacy", "v1"} {
		r := &hostileRound{e: e, proto: proto, root: filepath.Join(e.dir, proto)}
		err := r.run(ctx)
		if r.d != nil && r.alive() {
			r.d.Kill()
		}
		rd, ch := 0, 0
		if err == nil {
			rd, ch = r.outsideCounts() // before the failure folder's unmount
		}
		if r.sim != nil {
			r.sim.Close()
		}
		if r.unmount != nil {
			r.unmount()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", proto, err)
		}
		read, changed, restarts, attacks = read+rd, changed+ch, restarts+r.restarts, attacks+r.attacks
		stopOK = stopOK && r.stopOK
	}
	yes := map[bool]string{true: "yes", false: "no"}[stopOK]
	e.res.Summary = fmt.Sprintf("attacks %d, outside files read %d, outside files changed %d, daemon restarts %d, stop within grace %s",
		attacks, read, changed, restarts, yes)
	if read > 0 || changed > 0 || restarts > 0 || !stopOK {
		e.problem("%s", e.res.Summary)
	}
	return nil
}

// run sets the round up, mounts the attacks and waits for their outcome.
func (r *hostileRound) run(ctx context.Context) error {
	if err := r.setup(); err != nil {
		return err
	}
	// A client that follows the redirect sends the hook's secret path to
	// elsewhere as its Referer.
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		r.hookMu.Lock()
		r.hookHits++
		r.referers = append(r.referers, q.Header.Get("Referer"))
		r.hookMu.Unlock()
	}))
	defer elsewhere.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		r.hookMu.Lock()
		r.referers = append(r.referers, q.Header.Get("Referer"))
		r.hookMu.Unlock()
		http.Redirect(w, q, elsewhere.URL+"/stolen", http.StatusFound)
	}))
	defer redirect.Close()
	if err := r.writeConfig(redirect.URL + "/hook/SECRET-hook-path"); err != nil {
		return err
	}
	if err := r.start(); err != nil {
		return err
	}
	if _, err := r.d.WaitReady(30 * time.Second); err != nil {
		return err
	}
	if err := r.serverDelayAndSwap(ctx); err != nil {
		return err
	}
	if err := r.folderAttacks(ctx); err != nil {
		return err
	}
	r.attacks++ // the webhook redirect: every final job sends an event
	wait := time.Duration(r.e.count(60, 120)) * time.Second
	r.waitSettled(ctx, "file attacks", filepath.Join(r.inMove, "control.ply"), wait)
	// The attacks that kill or wedge an unfixed daemon come last, one
	// phase each, so that none hides another's outcome.
	if err := r.memoryAttacks(ctx, wait/2); err != nil {
		return err
	}
	if err := r.fifoAttacks(); err != nil {
		return err
	}
	r.waitSettled(ctx, "FIFO attacks", filepath.Join(r.inMove, "control2.ply"), wait/2)
	r.stop()
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	if r.hookHits > 0 {
		r.e.problem("%s: webhook-redirect: the redirect's target got %d request(s)", r.proto, r.hookHits)
	}
	for _, ref := range r.referers {
		if ref != "" {
			r.e.problem("%s: webhook-redirect: a Referer was sent (%s)", r.proto, ref)
			break
		}
	}
	return nil
}

// setup makes the folders, the outside files (with their snapshot) and the
// simulator; the failure folder is a tmpfs when it can be, so that a move
// there crosses filesystems and takes the copy path.
func (r *hostileRound) setup() error {
	r.outside, r.inMove, r.inDel = filepath.Join(r.root, "outside"), filepath.Join(r.root, "inbox-move"), filepath.Join(r.root, "inbox-delete")
	r.done, r.failed, r.stateDir = filepath.Join(r.root, "done"), filepath.Join(r.root, "failed"), filepath.Join(r.root, "state")
	for _, d := range []string{filepath.Join(r.outside, "dir"), r.inMove, r.inDel, r.done, r.failed, r.stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if os.Getuid() == 0 {
		if um, err := mountSmall(r.failed, r.root); err == nil {
			r.unmount = um
		} else {
			r.e.note("%s: no second filesystem for failure_dir (%v): the move does not cross filesystems", r.proto, err)
		}
	}
	r.markers, r.outSHAs = map[string]string{}, map[string]string{}
	mark := func(name string) string { return "OUTSIDE-" + name + "-" + randHex(8) }
	for _, f := range []struct {
		name string
		mode fs.FileMode
		ply  bool
	}{{"secret.ply", 0o700, true}, {"token", 0o600, false}, {"dir/y.ply", 0o644, true}, {"dir/keep.txt", 0o644, false}} {
		p := filepath.Join(r.outside, f.name)
		m := mark(strings.ReplaceAll(f.name, "/", "-"))
		var err error
		if f.ply {
			err = WriteSample(p, m, 300)
		} else {
			err = os.WriteFile(p, []byte(m+"\n"), f.mode)
		}
		if err == nil {
			err = os.Chmod(p, f.mode)
		}
		if err != nil {
			return err
		}
		r.markers[p] = m
		if r.outSHAs[p], err = FileSHA256(p); err != nil {
			return err
		}
	}
	var err error
	if r.before, err = snapshot(r.outside); err != nil {
		return err
	}
	so := apisim.Options{Dir: filepath.Join(r.root, "sim"), Seed: r.e.seed, ProcessingDelay: 60 * time.Millisecond,
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}}
	r.sim, err = apisim.New(so)
	return err
}

func (r *hostileRound) writeConfig(webhook string) error {
	token := filepath.Join(r.root, "token")
	if err := os.WriteFile(token, []byte(r.sim.Token()+"\n"), 0o600); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`api:
  base_url: %s
  protocol: %s
  token_file: %s
  ca_file: %s
  timeout: 30s
  max_server_wait: 2s
watch:
  - path: %s
    after: {on_success: move, success_dir: %s, on_failure: move, failure_dir: %s}
  - path: %s
    after: {on_success: delete}
settle: 200ms
rescan_interval: 1m
state_dir: %s
workers: 2
poll: {interval: 100ms, max_interval: 400ms, timeout: 10m}
notify: {webhook: %q}
metrics: {listen: "127.0.0.1:0"}
log: {level: info, format: json}
`, r.sim.URL(), r.proto, token, r.sim.CAFile(), r.inMove, r.done, r.failed, r.inDel, r.stateDir, webhook)
	r.cfgPath = filepath.Join(r.root, "config.yaml")
	return os.WriteFile(r.cfgPath, []byte(cfg), 0o600)
}

func (r *hostileRound) start() error {
	d, err := StartDaemonMemLimited(r.e.o.Bin, r.cfgPath, filepath.Join(r.root, "splatd.log"), hostileMemLimit)
	if err != nil {
		return err
	}
	r.d = d
	return nil
}

// jobs lists the round's jobs (splatd jobs -json); nil when the daemon
// does not answer within 5 s (a wedged daemon).
func (r *hostileRound) jobs(ctx context.Context) []jobView {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := Splatd(ctx, r.e.o.Bin, "jobs", "-config", r.cfgPath, "-json")
	if err != nil {
		return nil
	}
	var views []jobView
	if decodeJSON(out, &views) != nil {
		return nil
	}
	return views
}

// waitJob waits until path has a job that ok accepts, restarting a daemon
// that died meanwhile; it returns the job, or false at the deadline.
func (r *hostileRound) waitJob(ctx context.Context, path string, timeout time.Duration, ok func(jobView) bool) (jobView, bool) {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) && ctx.Err() == nil {
		r.superviseOnce()
		for _, j := range r.jobs(ctx) {
			if j.File == path && ok(j) {
				return j, true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return jobView{}, false
}

// superviseOnce restarts a daemon that exited, as Restart=on-failure
// would, up to the unit's start limit.
func (r *hostileRound) superviseOnce() {
	select {
	case <-r.d.Done():
	default:
		return
	}
	if r.restarts >= hostileRestartLimit {
		return
	}
	r.restarts++
	r.e.note("%s: the daemon died (%v); restart %d", r.proto, r.d.Err(), r.restarts)
	time.Sleep(time.Second)
	if err := r.start(); err != nil {
		r.e.problem("%s: restart: %v", r.proto, err)
	}
}

func (r *hostileRound) alive() bool {
	select {
	case <-r.d.Done():
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits hostileGrace for a clean exit.
func (r *hostileRound) stop() {
	if !r.alive() {
		r.stopOK = true
		return
	}
	err := r.d.Stop(hostileGrace)
	r.stopOK = err == nil || !strings.Contains(err.Error(), "did not stop")
	if !r.stopOK {
		r.e.note("%s: %v", r.proto, err)
	}
}

// serverDelayAndSwap: the sign (legacy) or create (v1) call answers 503
// with Retry-After: 315360000 once; the job must be tried again within
// api.max_server_wait, not in ten years. While it waits, hashed, its file's
// content is replaced with other bytes of the same size and mtime: what is
// published must be what was hashed.
func (r *hostileRound) serverDelayAndSwap(ctx context.Context) error {
	route := apisim.RouteSignedURL
	if r.proto == "v1" {
		route = apisim.RouteV1CreateUpload
	}
	r.sim.UpdateFaults(func(f *apisim.Faults) {
		f.Errors, f.ErrorStatus, f.ErrorRetryAfter = map[string]int{route: 1}, http.StatusServiceUnavailable, "315360000"
	})
	defer r.sim.UpdateFaults(func(f *apisim.Faults) { f.ErrorRetryAfter = "" })
	p := filepath.Join(r.inMove, "hashed.ply")
	if err := WriteSample(p, "hashed-A-"+randHex(8), 2000); err != nil {
		return err
	}
	r.attacks += 2
	j, ok := r.waitJob(ctx, p, 30*time.Second, func(j jobView) bool { return j.SHA256 != "" && j.Error != "" })
	if !ok {
		r.e.problem("%s: retry-after: the refused call never showed on the job", r.proto)
		return nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	// Same length, other bytes, same mtime: written in place.
	var b bytes.Buffer
	if err := writeSampleTo(&b, "hashed-B-"+randHex(8), 2000); err != nil {
		return err
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		return err
	}
	if j.NextAttempt != nil && time.Until(*j.NextAttempt) > time.Hour {
		r.e.problem("%s: retry-after: job %d parked until %s", r.proto, j.ID, j.NextAttempt.Format(time.RFC3339))
		if _, err := Splatd(ctx, r.e.o.Bin, "retry", "-config", r.cfgPath, fmt.Sprint(j.ID)); err != nil {
			r.e.problem("%s: retry-after: splatd retry %d: %v", r.proto, j.ID, err)
		}
	}
	fin, ok := r.waitJob(ctx, p, 60*time.Second, func(j jobView) bool { return finalStage(j.Stage) })
	if !ok {
		r.e.problem("%s: retry-after: the job did not finish within a minute of its refused call", r.proto)
		return nil
	}
	swapped := sha256Hex(b.Bytes())
	if pubs := r.sim.PublishesByHash(); pubs[swapped] > 0 && fin.SHA256 != swapped {
		r.e.problem("%s: hash-then-swap: the server got content %.12s but job %d is %s with sha256 %.12s", r.proto, swapped, fin.ID, fin.Stage, fin.SHA256)
	}
	return nil
}

// folderAttacks mounts the attacks on file access: a file and a subfolder
// swapped for symlinks after discovery, a symlinked sidecar moved across
// filesystems; and a control file that must still be published.
func (r *hostileRound) folderAttacks(ctx context.Context) error {
	swapFile := filepath.Join(r.inMove, "b1", "x.ply")
	swapDir := filepath.Join(r.inDel, "sub")
	for _, p := range []string{swapFile, filepath.Join(swapDir, "y.ply")} {
		if err := writeIncomplete(p); err != nil {
			return err
		}
	}
	steps := []func() error{
		func() error {
			return os.Symlink(filepath.Join(r.outside, "token"), filepath.Join(r.inMove, "leak.splat.yaml"))
		},
		func() error { return WriteSample(filepath.Join(r.inMove, "leak.ply"), "leak-"+randHex(8), 200) },
		func() error { return WriteSample(filepath.Join(r.inMove, "control.ply"), "control-"+randHex(8), 200) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	r.attacks += 3 // file swap, folder swap, sidecar link
	// The swaps, once the daemon has the files as jobs.
	if _, ok := r.waitJob(ctx, swapFile, 30*time.Second, func(jobView) bool { return true }); ok {
		if err := os.Remove(swapFile); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join(r.outside, "secret.ply"), swapFile); err != nil {
			return err
		}
	} else {
		r.e.note("%s: file-swap: x.ply never became a job", r.proto)
	}
	if _, ok := r.waitJob(ctx, filepath.Join(swapDir, "y.ply"), 30*time.Second, func(jobView) bool { return true }); ok {
		if err := os.Rename(swapDir, filepath.Join(r.root, "sub-moved-away")); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join(r.outside, "dir"), swapDir); err != nil {
			return err
		}
	} else {
		r.e.note("%s: folder-swap: sub/y.ply never became a job", r.proto)
	}
	return nil
}

// memoryAttacks: a sidecar that is a link to /dev/zero, and a folder
// .splat.yaml whose title template writes ten gigabytes. Once their jobs
// are final (or the daemon stayed down), the files are taken away and a
// dead daemon is started again by hand (not counted as a restart), so
// that the FIFO phase has a daemon to attack.
func (r *hostileRound) memoryAttacks(ctx context.Context, wait time.Duration) error {
	if err := r.mountMemoryAttacks(); err != nil {
		return err
	}
	r.waitSettled(ctx, "memory attacks", "", wait, filepath.Join(r.inMove, "zero.ply"), filepath.Join(r.inMove, "tmpl", "t.ply"))
	for _, p := range []string{filepath.Join(r.inMove, "zero.splat.yaml"), filepath.Join(r.inMove, "zero.ply"), filepath.Join(r.inMove, "tmpl")} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	if r.alive() {
		return nil
	}
	r.e.note("%s: started again by hand after the memory attacks", r.proto)
	if err := r.start(); err != nil {
		return err
	}
	_, err := r.d.WaitReady(30 * time.Second)
	return err
}

// fifoAttacks: FIFOs as a receipt and as a sidecar (a reader blocks on
// them), with a control file that must still be published.
func (r *hostileRound) fifoAttacks() error {
	steps := []func() error{
		func() error { return syscall.Mkfifo(filepath.Join(r.inMove, "fifo1.ply.splat.json"), 0o644) },
		func() error { return syscall.Mkfifo(filepath.Join(r.inMove, "fifo2.splat.yaml"), 0o644) },
		func() error { return WriteSample(filepath.Join(r.inMove, "fifo1.ply"), "fifo1-"+randHex(8), 200) },
		func() error { return WriteSample(filepath.Join(r.inMove, "fifo2.ply"), "fifo2-"+randHex(8), 200) },
		func() error { return WriteSample(filepath.Join(r.inMove, "control2.ply"), "control2-"+randHex(8), 200) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	r.attacks++
	return nil
}

func (r *hostileRound) mountMemoryAttacks() error {
	dir := filepath.Join(r.inMove, "tmpl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return os.Symlink("/dev/zero", filepath.Join(r.inMove, "zero.splat.yaml")) },
		func() error { return WriteSample(filepath.Join(r.inMove, "zero.ply"), "zero-"+randHex(8), 200) },
		func() error {
			return os.WriteFile(filepath.Join(dir, ".splat.yaml"), []byte("title: \"{{range 1000000000}}AAAAAAAAAA{{end}}\"\n"), 0o644)
		},
		func() error { return WriteSample(filepath.Join(dir, "t.ply"), "tmpl-"+randHex(8), 200) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	r.attacks += 2
	return nil
}

// waitSettled waits until the control file (if any) is done, every
// expected file has a final job and no job is left running (restarting a
// dead daemon meanwhile), or the timeout.
func (r *hostileRound) waitSettled(ctx context.Context, phase, control string, timeout time.Duration, expect ...string) {
	end := time.Now().Add(timeout)
	var last []jobView
	for time.Now().Before(end) && ctx.Err() == nil {
		r.superviseOnce()
		if !r.alive() {
			break // the start limit is spent: the service stays failed
		}
		last = r.jobs(ctx)
		if settledOn(last, control, expect) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !r.alive() {
		r.e.problem("%s: %s: the daemon stayed down after %d restarts (the unit's start limit)", r.proto, phase, r.restarts)
		return
	}
	open := []string{}
	if last == nil {
		open = append(open, "(splatd jobs did not answer: the daemon is wedged)")
	}
	for _, j := range last {
		if !finalStage(j.Stage) {
			open = append(open, fmt.Sprintf("%s %s (%s)", filepath.Base(j.File), j.Stage, oneLineTrunc(j.Error, 80)))
		}
	}
	r.e.problem("%s: %s: not settled within %s: %d jobs, control file done=%v; jobs still open: %s", r.proto, phase, timeout,
		len(last), control == "" || hasDone(last, control), strings.Join(open, "; "))
}

// settledOn reports whether jobs are all final, control (if any) is done
// and every expected file has a job.
func settledOn(jobs []jobView, control string, expect []string) bool {
	if len(jobs) == 0 {
		return false
	}
	have := map[string]bool{}
	for _, j := range jobs {
		if !finalStage(j.Stage) {
			return false
		}
		have[j.File] = true
	}
	for _, p := range expect {
		if !have[p] {
			return false
		}
	}
	return control == "" || hasDone(jobs, control)
}

func hasDone(jobs []jobView, path string) bool {
	for _, j := range jobs {
		if j.File == path && j.Stage == "done" {
			return true
		}
	}
	return false
}

func finalStage(s string) bool {
	switch s {
	case "done", "failed", "held", "canceled":
		return true
	}
	return false
}

// outsideCounts returns how many outside files were read and changed, and
// notes each with how.
func (r *hostileRound) outsideCounts() (read, changed int) {
	after, err := snapshot(r.outside)
	if err != nil {
		r.e.problem("%s: snapshot of the outside folder: %v", r.proto, err)
	}
	for p, was := range r.before {
		if now, ok := after[p]; !ok || now != was {
			changed++
			r.e.note("%s: outside file changed: %s (%+v → %+v, present %v)", r.proto, rel(r.root, p), was, now, ok)
		}
	}
	for p := range after {
		if _, ok := r.before[p]; !ok {
			changed++
			r.e.note("%s: outside file appeared: %s", r.proto, rel(r.root, p))
		}
	}
	found := r.markersFound()
	pubs := r.sim.PublishesByHash()
	for p, m := range r.markers {
		where := found[m]
		if pubs[r.outSHAs[p]] > 0 {
			where = append(where, "published")
		}
		if len(where) > 0 {
			read++
			r.e.note("%s: outside file read: %s (found in %s)", r.proto, rel(r.root, p), strings.Join(where, ", "))
		}
	}
	return read, changed
}

// markersFound scans every regular file the daemon or the server may have
// written (storage, watch, success and failure folders, the log) for the
// outside markers; symlinks are not followed.
func (r *hostileRound) markersFound() map[string][]string {
	found := map[string][]string{}
	for _, dir := range []string{filepath.Join(r.root, "sim"), r.inMove, r.inDel, r.done, r.failed, filepath.Join(r.root, "splatd.log")} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := readCapped(p, 64<<20)
			if err != nil {
				return nil
			}
			for _, m := range r.markers {
				if bytes.Contains(b, []byte(m)) {
					found[m] = append(found[m], rel(r.root, p))
				}
			}
			return nil
		})
	}
	return found
}

// snapshot records every entry under dir, links and folders included,
// without following links.
func snapshot(dir string) (map[string]fileSig, error) {
	out := map[string]fileSig{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		sig := fileSig{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() {
			if b, err := readCapped(p, 64<<20); err == nil {
				sig.sha = sha256Hex(b)
			}
		}
		if fi.IsDir() {
			sig.size, sig.mtime = 0, time.Time{} // a folder's own listing is checked entry by entry
		}
		out[p] = sig
		return nil
	})
	return out, err
}

// writeIncomplete writes a PLY whose header promises more splats than it
// holds: the daemon finds it and waits for the rest.
func writeIncomplete(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := writeSampleTo(&b, "incomplete-"+randHex(8), 2000); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes()[:b.Len()/2], 0o644)
}

func readCapped(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// writeSampleTo is WriteSample into a buffer.
func writeSampleTo(w *bytes.Buffer, tag string, n int) error {
	var b bytes.Buffer
	if err := splatfile.WritePLY(&b, n); err != nil {
		return err
	}
	w.Write(bytes.Replace(b.Bytes(), []byte("comment splatd sample\n"), []byte("comment splatd bench "+tag+"\n"), 1))
	return nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

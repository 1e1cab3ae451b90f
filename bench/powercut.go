package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splatd/splatd/bench/lazyfs"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
)

// The power-cut scenario (bench/README.md "Power cuts"): watch, success
// and state folders on lazyfs mounts; each round drops two files and cuts
// power at the k-th operation of one kind, then SIGKILL, drop, remount,
// restart and wait for the files.

// powerKinds are the places a cut is armed at, drawn in turn.
var powerKinds = []string{"publish", "receipt", "move", "move-xfs", "pacer", "store"}

// powerRig is the scenario's machine: two mounts, the API front, the files.
type powerRig struct {
	e    *tenv
	m    *lazyfs.Machine
	a, b *lazyfs.FS

	inSame, inCross, doneSame, doneCross, state string // relative to their mount

	files    []powerFile
	perRound int

	// Counted by the hook under the machine's lock; read once disarmed.
	where string
	k     int
	seen  map[string]int
	last  map[string]string // folder → kind of the last operation in it

	pubMu    sync.Mutex
	pubCount int
	pubArmed bool

	trace      []lazyfs.Op       // the counted operations since the last cut
	cutTrace   []lazyfs.Op       // trace as it was at the last cut
	killed     *Daemon           // the daemon the last cut killed
	dev        map[string]uint64 // st_dev of each mount, as at the first mount
	voids      int               // remounts whose st_dev changed
	shaCache   map[string]string // path|size|mtime → sha256
	frontClose func()
	reported   map[string]bool // problems already printed on a cut's line
}

// powerFile is one dropped file.
type powerFile struct {
	rel   string // under mount a: inbox-same/… or inbox-cross/…
	cross bool   // its success folder is on mount b
	sha   string
	void  string // why it is not judged lost or unfinished
}

func runPowerCut(ctx context.Context, e *tenv) error {
	cuts, perRound := e.count(12, 100), 2
	r := &powerRig{e: e, perRound: perRound, m: lazyfs.NewMachine(), inSame: "inbox-same", inCross: "inbox-cross",
		doneSame: "done", doneCross: "done-xfs", state: "state", shaCache: map[string]string{}, reported: map[string]bool{}}
	// The folders an operator makes (the success folders' own subfolders
	// are the daemon's to make), durable from the start.
	diskA, diskB := filepath.Join(e.dir, "disk-a"), filepath.Join(e.dir, "disk-b")
	for _, d := range []string{filepath.Join(diskA, r.inSame), filepath.Join(diskA, r.inCross),
		filepath.Join(diskA, r.state), filepath.Join(diskA, r.doneSame), filepath.Join(diskB, r.doneCross)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if r.a, err = lazyfs.New(r.m, "a", diskA, filepath.Join(e.dir, "mnt-a")); err != nil {
		return err
	}
	if r.b, err = lazyfs.New(r.m, "b", diskB, filepath.Join(e.dir, "mnt-b")); err != nil {
		return err
	}
	if err := r.a.Mount(); err != nil {
		return &skipError{reason: "NOT RUN: FUSE cannot be mounted here (" + err.Error() + "); the power-cut targets are unproven on this machine"}
	}
	defer r.shutdown()
	if err := r.b.Mount(); err != nil {
		return err
	}
	r.dev = map[string]uint64{"a": mountDev(r.a), "b": mountDev(r.b)}
	if err := r.setup(); err != nil {
		return err
	}
	e.logf("torture: %s: %d cuts, seed %d", e.name, cuts, e.seed)
	if err := e.start(); err != nil {
		return err
	}
	if _, err := e.d.WaitReady(60 * time.Second); err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	// A first round with no cut counts each kind's operations per round.
	if err := r.drop(perRound); err != nil {
		return err
	}
	r.arm("", 0)
	if !r.waitFinished(ctx, r.files, 60*time.Second, 60*time.Second) {
		return errors.New("the first round (no cut) did not finish")
	}
	r.m.Arm(nil)
	calib := maps.Clone(r.seen)
	calib["publish"] = perRound
	e.note("operations per round of %d files (no cut): %s", perRound, fmtCounts(calib))

	byKind := map[string]int{}
	failedStarts, idle, exits, outside := 0, 0, 0, 0
	var order []string
	for n := 1; n <= cuts && ctx.Err() == nil; n++ {
		if len(order) == 0 {
			order = slices.Clone(powerKinds)
			e.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		where := order[0]
		order = order[1:]
		// Two thirds of a round's count: the later ones do not come in
		// every round. The pacer saves when a window is spent, not at a
		// fixed step: its cut is one of the four steps of a round's first
		// save (create, fsync, rename, folder fsync).
		k := 1 + e.rng.IntN(max(1, calib[where]*2/3))
		if where == "pacer" {
			k = 1 + e.rng.IntN(4)
		}
		if err := r.drop(perRound); err != nil {
			return err
		}
		r.arm(where, k)
		cutAt := r.waitCut(ctx, 30*time.Second)
		if exit := r.exitedAlone(); exit != "" {
			exits++
			e.note("cut %3d: EXITED on its own before the cut: %s", n, exit)
		}
		if r.killedFromOutside() {
			outside++
			e.note("cut %3d: the daemon was SIGKILLed by another process on this machine before the cut", n)
		}
		if cutAt == "" {
			idle++
			r.m.CutNow("idle")
			cutAt = fmt.Sprintf("idle (the round ended before %s op %d)", where, k)
		} else {
			byKind[where]++
		}
		dropped, err := r.powerCycle()
		if err != nil {
			return err
		}
		outcome, startErr := r.restart(ctx)
		if startErr != nil {
			failedStarts++
			e.note("cut %3d at %s; dropped %s; FAILED START: %v", n, cutAt, dropped, startErr)
			e.logf("torture: %s: cut %d: failed start: %v", e.name, n, startErr)
			break
		}
		line := fmt.Sprintf("cut %3d at %s; dropped %s; %s", n, cutAt, dropped, outcome)
		e.note("%s", line)
		e.logf("torture: %s: %s", e.name, line)
		exit := r.exitedAlone()
		if exit != "" {
			exits++
			e.note("cut %3d: EXITED on its own after the restart: %s; started again", n, exit)
		}
		if r.killedFromOutside() {
			outside++
			e.note("cut %3d: the daemon was SIGKILLed by another process on this machine after the restart; started again", n)
			exit = "outside"
		}
		if exit != "" {
			if err := e.start(); err != nil {
				return err
			}
		}
	}
	if outside > 0 {
		e.note("SIGKILLs from outside this scenario: %d (another process on this machine; their rounds are cuts at an unplanned moment, and count as idle)", outside)
	}
	if r.voids > 0 {
		e.note("remounts whose st_dev changed (another mount took the number; the daemon then takes its files for replaced ones): %d", r.voids)
	}
	// The last word: every file finished, however long its backoff.
	r.waitFinished(ctx, r.files, 90*time.Second, 20*time.Second)
	e.stop()
	r.verdict(cuts, byKind, idle, failedStarts, exits)
	return nil
}

// setup starts the simulator and the API front, and writes the config.
func (r *powerRig) setup() error {
	e := r.e
	so := apisim.Options{PartSize: v1PartSizeTorture, ProcessingDelay: 60 * time.Millisecond, Seed: e.seed,
		Dir: filepath.Join(e.dir, "sim"), Window: time.Second,
		// Tight enough that windows are spent and the pacer saves.
		Limits: map[apisim.Class]int{apisim.ClassNormal: 12, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}}
	sim, err := apisim.New(so)
	if err != nil {
		return err
	}
	e.sim = sim
	front := httptest.NewUnstartedServer(r.api(sim.Handler()))
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.StartTLS()
	r.frontClose = front.Close
	simCA, err := os.ReadFile(sim.CAFile())
	if err != nil {
		return err
	}
	ca := append(simCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})...)
	caFile := filepath.Join(e.dir, "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		return err
	}
	token := filepath.Join(e.dir, "token")
	if err := os.WriteFile(token, []byte(sim.Token()+"\n"), 0o600); err != nil {
		return err
	}
	a, b := r.a.Mountpoint(), r.b.Mountpoint()
	cfg := fmt.Sprintf(`api:
  base_url: %s
  protocol: v1
  token_file: %s
  ca_file: %s
  timeout: 30s
watch:
  - path: %s
    after: {success_dir: %s}
  - path: %s
    after: {success_dir: %s}
settle: 200ms
rescan_interval: 2s
state_dir: %s
workers: 2
publish: {on_uncertain: republish, encode: "off"}
upload: {parallel_parts: 2}
poll: {interval: 100ms, max_interval: 400ms, timeout: 10m}
after: {on_success: move, success_dir: %s, receipt: true}
metrics: {listen: "127.0.0.1:0"}
log: {level: info, format: json}
`, front.URL, token, caFile, filepath.Join(a, r.inSame), filepath.Join(a, r.doneSame),
		filepath.Join(a, r.inCross), filepath.Join(b, r.doneCross), filepath.Join(a, r.state), filepath.Join(a, r.doneSame))
	e.cfgPath = filepath.Join(e.dir, "config.yaml")
	e.logPath = filepath.Join(e.dir, "splatd.log")
	e.shas = map[string]string{}
	return os.WriteFile(e.cfgPath, []byte(cfg), 0o600)
}

// api is the simulator's API behind a front that can cut the power the
// moment the server has completed an upload (its splat made) and before
// the daemon hears of it; after a cut no request reaches the server.
func (r *powerRig) api(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.cutNow() {
			panic(http.ErrAbortHandler)
		}
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/complete") {
			h.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		r.pubMu.Lock()
		r.pubCount++
		cut := r.pubArmed && r.where == "publish" && r.pubCount == r.k
		r.pubMu.Unlock()
		if cut {
			r.m.CutNow(fmt.Sprintf("publish: complete %d answered %d by the server, the answer lost", r.k, rec.Code))
			panic(http.ErrAbortHandler)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

func (r *powerRig) cutNow() bool {
	select {
	case <-r.m.Cut():
		return true
	default:
		return false
	}
}

// arm sets the cut at the k-th counted operation of kind where ("" counts
// without cutting) from now on.
func (r *powerRig) arm(where string, k int) {
	r.pubMu.Lock()
	r.where, r.k, r.pubCount, r.pubArmed = where, k, 0, true
	r.pubMu.Unlock()
	r.seen, r.last = map[string]int{}, map[string]string{}
	r.m.Arm(r.hook)
}

// hook counts and traces the operations that change names or make things
// durable (not writes and attribute changes) by kind; called under the
// machine's lock.
func (r *powerRig) hook(op lazyfs.Op) bool {
	kind := r.classify(op)
	if op.Kind == "write" || op.Kind == "setattr" {
		return false
	}
	r.trace = append(r.trace, op)
	r.seen[kind]++
	return kind == r.where && r.seen[kind] == r.k
}

// classify names the step an operation belongs to, by the names it
// touches; a folder's fsync belongs to the step of the last operation in
// that folder.
func (r *powerRig) classify(op lazyfs.Op) string {
	if op.Kind == "fsyncdir" {
		if k := r.last[op.FS+":"+op.Path]; k != "" {
			return k
		}
		return "other"
	}
	base := filepath.Base(op.Path)
	var kind string
	switch {
	case op.FS == "a" && strings.HasPrefix(op.Path, r.state+"/"):
		kind = "pacer"
		if base == queue.FileName {
			kind = "store"
		}
	case strings.HasSuffix(base, after.ReceiptSuffix) || strings.HasPrefix(base, ".splatd-tmp-"):
		kind = "receipt"
	case op.FS == "b" || (op.Kind == "unlink" && strings.HasPrefix(op.Path, r.inCross+"/")):
		kind = "move-xfs"
	case op.Kind == "mkdir" || op.Kind == "link" || op.Kind == "unlink" || op.Kind == "rename":
		kind = "move"
	default:
		kind = "other"
	}
	r.last[op.FS+":"+filepath.Dir(op.Path)] = kind
	if op.To != "" {
		r.last[op.FS+":"+filepath.Dir(op.To)] = kind
	}
	return kind
}

// drop writes n files through the mount, one per watch folder in turn,
// every third in a subfolder, as a careful capture tool does: each
// under a temporary name, fsynced, renamed, and its folder fsynced (which
// makes durable whatever else changed in that folder too).
func (r *powerRig) drop(n int) error {
	for range n {
		i := len(r.files)
		f := powerFile{cross: i%2 == 1}
		dir := r.inSame
		if f.cross {
			dir = r.inCross
		}
		if i%3 == 0 {
			// Two files of an inbox per subfolder, rounds apart: the first
			// one's move makes the success subfolder, the second one's
			// writer fsyncs the folder the first one left.
			sub := filepath.Join(dir, fmt.Sprintf("batch-%03d", i/12))
			if err := os.Mkdir(filepath.Join(r.a.Mountpoint(), sub), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := fsyncPath(filepath.Join(r.a.Mountpoint(), dir)); err != nil {
				return err
			}
			dir = sub
		}
		f.rel = filepath.Join(dir, fmt.Sprintf("pc-%03d.ply", i))
		p := filepath.Join(r.a.Mountpoint(), f.rel)
		if err := WriteSample(p, fmt.Sprintf("power %d %d", i, r.e.seed), v1Splats(i)); err != nil {
			return err
		}
		for _, q := range []string{p, filepath.Dir(p)} {
			if err := fsyncPath(q); err != nil {
				return err
			}
		}
		sum, err := FileSHA256(p)
		if err != nil {
			return err
		}
		f.sha = sum
		r.files = append(r.files, f)
		r.e.files = append(r.e.files, p)
		r.e.shas[p] = sum
	}
	return nil
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// target is where f's move puts it, in the backing folder (numbered
// names are tried by finished and locate).
func (r *powerRig) target(f powerFile) string {
	in, done, disk := r.inSame, r.doneSame, r.a.Backing()
	if f.cross {
		in, done, disk = r.inCross, r.doneCross, r.b.Backing()
	}
	rel, _ := filepath.Rel(in, f.rel)
	return filepath.Join(disk, done, rel)
}

// candidates are the names a move of f may have used.
func (r *powerRig) candidates(f powerFile) []string {
	t := r.target(f)
	ext := filepath.Ext(t)
	out := []string{t}
	for i := 1; i <= 3; i++ {
		out = append(out, fmt.Sprintf("%s.%d%s", strings.TrimSuffix(t, ext), i, ext))
	}
	return out
}

// finished says f sits in its success folder with a done receipt for its
// content, read from the backing folders (never through a mount, which a
// cut would stop).
func (r *powerRig) finished(f powerFile) bool {
	for _, p := range r.candidates(f) {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if rc, err := readReceipt(p); err == nil && rc.Status == "done" && rc.SHA256 == f.sha {
			return true
		}
	}
	return false
}

func readReceipt(p string) (after.Receipt, error) {
	var rc after.Receipt
	b, err := os.ReadFile(after.ReceiptPath(p))
	if err == nil {
		err = json.Unmarshal(b, &rc)
	}
	return rc, err
}

// locate is where f's content is now (its inbox name or a success folder
// name whose content is f's), "" when nowhere.
func (r *powerRig) locate(f powerFile) string {
	for _, p := range append([]string{filepath.Join(r.a.Backing(), f.rel)}, r.candidates(f)...) {
		if r.sha(p) == f.sha {
			return p
		}
	}
	return ""
}

func (r *powerRig) sha(p string) string {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	key := fmt.Sprintf("%s|%d|%d", p, fi.Size(), fi.ModTime().UnixNano())
	if s, ok := r.shaCache[key]; ok {
		return s
	}
	s, err := FileSHA256(p)
	if err != nil {
		return ""
	}
	r.shaCache[key] = s
	return s
}

func (r *powerRig) roundFinished() bool {
	for _, f := range r.files[len(r.files)-r.perRound:] {
		if !r.finished(f) {
			return false
		}
	}
	return true
}

// waitFinished waits until every file of files is finished, the daemon
// exits, timeout passes, or nothing moved (no file finished, no API call)
// for quiet.
func (r *powerRig) waitFinished(ctx context.Context, files []powerFile, timeout, quiet time.Duration) bool {
	end := time.Now().Add(timeout)
	lastDone, lastCalls, since := -1, -1, time.Now()
	for {
		done := 0
		for _, f := range files {
			if r.finished(f) {
				done++
			}
		}
		if done == len(files) {
			return true
		}
		if calls := r.apiCalls(); done != lastDone || calls != lastCalls {
			lastDone, lastCalls, since = done, calls, time.Now()
		}
		if time.Now().After(end) || time.Since(since) > quiet || ctx.Err() != nil {
			return false
		}
		select {
		case <-r.e.d.Done():
			return false
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// apiCalls counts the simulator's answers so far.
func (r *powerRig) apiCalls() int {
	n := 0
	for _, codes := range r.e.sim.Stats().Requests {
		for _, c := range codes {
			n += c
		}
	}
	return n
}

// killedFromOutside says the daemon died of a SIGKILL this scenario did
// not send.
func (r *powerRig) killedFromOutside() bool {
	d := r.e.d
	select {
	case <-d.Done():
		return r.killed != d && KilledBySIGKILL(d.Err())
	default:
		return false
	}
}

// mountDev is a mount's st_dev.
func mountDev(f *lazyfs.FS) uint64 {
	fi, err := os.Stat(f.Mountpoint())
	if err != nil {
		return 0
	}
	return uint64(fi.Sys().(*syscall.Stat_t).Dev)
}

// remount mounts f again with the st_dev it had: a disk keeps its device
// number across a power cut, and the daemon knows files by it. The kernel
// gives a mount the smallest free number: a smaller one freed meanwhile is
// held by a small tmpfs while f mounts again; a number another mount took
// is waited for, 5 s at most.
func (r *powerRig) remount(f *lazyfs.FS) error {
	var holds []string
	defer func() {
		for _, h := range holds {
			_ = syscall.Unmount(h, syscall.MNT_DETACH)
		}
	}()
	want := r.dev[f.Name()]
	for try := 0; ; try++ {
		if err := f.Mount(); err != nil {
			return err
		}
		dev := mountDev(f)
		if dev == want {
			return nil
		}
		if try == 40 {
			// The daemon knows files by st_dev: the files not finished
			// now are not judged (they are taken for replaced ones).
			r.voids++
			void := 0
			for i := range r.files {
				if r.files[i].void == "" && !r.finished(r.files[i]) {
					r.files[i].void = fmt.Sprintf("mount %s's st_dev changed from %d to %d under it", f.Name(), want, dev)
					void++
				}
			}
			r.e.note("st_dev of mount %s changed from %d to %d across a remount (another mount took the number): %d unfinished files not judged", f.Name(), want, dev, void)
			r.dev[f.Name()] = dev
			return nil
		}
		if err := f.Unmount(); err != nil {
			return err
		}
		if dev < want && len(holds) < 16 {
			h := filepath.Join(r.e.dir, fmt.Sprintf("hold-%d", len(holds)))
			if err := os.MkdirAll(h, 0o755); err == nil && syscall.Mount("tmpfs", h, "tmpfs", 0, "size=4k") == nil {
				holds = append(holds, h)
				continue
			}
		}
		time.Sleep(125 * time.Millisecond)
	}
}

// exitedAlone describes the daemon's exit when it ended by itself (not by
// the cut's SIGKILL), "" while it runs or when killed.
func (r *powerRig) exitedAlone() string {
	d := r.e.d
	select {
	case <-d.Done():
	default:
		return ""
	}
	if KilledBySIGKILL(d.Err()) {
		return ""
	}
	msgs := d.Errors()
	if len(msgs) > 3 {
		msgs = msgs[len(msgs)-3:]
	}
	return fmt.Sprintf("%v (exit), last errors %q", d.Err(), msgs)
}

// waitCut waits for the armed cut and returns where it came; "" when the
// round finished (and stayed quiet for a second) without it, or timeout.
func (r *powerRig) waitCut(ctx context.Context, timeout time.Duration) string {
	end := time.Now().Add(timeout)
	var quietSince time.Time
	for time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-r.m.Cut():
			return r.m.CutPoint()
		case <-r.e.d.Done():
			return ""
		case <-time.After(50 * time.Millisecond):
		}
		switch {
		case !r.roundFinished():
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > time.Second:
			return ""
		}
	}
	return ""
}

// powerCycle is the cut itself: SIGKILL, the stopped operations let go,
// both file systems unmounted, what was not durable dropped, remounted.
func (r *powerRig) powerCycle() (string, error) {
	r.pubMu.Lock()
	r.pubArmed = false
	r.pubMu.Unlock()
	r.kill()
	for _, f := range []*lazyfs.FS{r.a, r.b} {
		if err := f.Unmount(); err != nil {
			return "", err
		}
	}
	var parts []string
	for _, f := range []*lazyfs.FS{r.a, r.b} {
		dr, err := f.Apply()
		if err != nil {
			return "", err
		}
		if !dr.Empty() || len(dr.Anomaly) > 0 {
			parts = append(parts, f.Name()+": "+describeDropped(dr))
		}
	}
	r.m.PowerOn()
	for _, f := range []*lazyfs.FS{r.a, r.b} {
		if err := r.remount(f); err != nil {
			return "", err
		}
	}
	r.cutTrace, r.trace = r.trace, nil
	r.arm("", 0) // traced until the next cut, none armed yet
	if len(parts) == 0 {
		return "nothing", nil
	}
	return strings.Join(parts, "; "), nil
}

func (r *powerRig) kill() {
	d := r.e.d
	if d == nil {
		return
	}
	select {
	case <-d.Done():
		return
	default:
	}
	r.killed = d
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	r.m.Release() // a request the cut holds keeps the killed process from exiting
	<-d.Done()
}

func describeDropped(d lazyfs.Dropped) string {
	var parts []string
	for _, g := range []struct {
		what  string
		names []string
	}{{"lost", d.Lost}, {"back", d.Revived}, {"reverted", d.Reverted}, {"ANOMALY", d.Anomaly}} {
		if len(g.names) == 0 {
			continue
		}
		names := g.names
		more := ""
		if len(names) > 4 {
			names, more = names[:4], fmt.Sprintf(" +%d", len(g.names)-4)
		}
		parts = append(parts, fmt.Sprintf("%s %s%s", g.what, strings.Join(names, " "), more))
	}
	return strings.Join(parts, ", ")
}

// restart starts the daemon after a cut, waits for every file, and says
// what became of them: problems not seen at an earlier cut are named.
func (r *powerRig) restart(ctx context.Context) (string, error) {
	e := r.e
	if err := e.start(); err != nil {
		return "", err
	}
	if _, err := e.d.WaitReady(60 * time.Second); err != nil {
		return "", err
	}
	r.waitFinished(ctx, r.files[len(r.files)-r.perRound:], 45*time.Second, 4*time.Second)
	st := r.check()
	var news []string
	for _, p := range append(st.problems, st.notes...) {
		if !r.reported[p] {
			r.reported[p] = true
			news = append(news, p)
		}
	}
	if len(news) == 0 && len(st.problems)+len(st.notes) == 0 {
		return fmt.Sprintf("ok (%d files, each published once, moved, receipt done)", len(r.files)), nil
	}
	if len(news) == 0 {
		return fmt.Sprintf("no new problem (%d from earlier cuts)", len(st.problems)+len(st.notes)), nil
	}
	for i, p := range news {
		if strings.HasPrefix(p, "LOST ") {
			news[i] += "; operations on its folders since the last cut: " + r.traceOf(strings.Fields(p)[1])
		}
	}
	return strings.Join(news, "; "), nil
}

// traceOf lists the counted operations between the last two cuts on the
// folders of the file named name, its inbox folder and its success folder.
func (r *powerRig) traceOf(name string) string {
	var f powerFile
	for _, g := range r.files {
		if filepath.Base(g.rel) == name {
			f = g
		}
	}
	in := filepath.Dir(f.rel)
	done, _ := filepath.Rel(r.a.Backing(), filepath.Dir(r.target(f)))
	if f.cross {
		done, _ = filepath.Rel(r.b.Backing(), filepath.Dir(r.target(f)))
	}
	var out []string
	for _, op := range r.cutTrace {
		for _, p := range []string{op.Path, op.To} {
			d := filepath.Dir(p)
			if op.Kind == "fsyncdir" {
				d = p
			}
			if p != "" && (d == in || d == done) {
				who := ""
				if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", op.Pid)); err == nil {
					who = " (by the writer)"
				}
				out = append(out, op.FS+": "+op.Kind+" "+op.Path+arrowTo(op.To)+who)
				break
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func arrowTo(to string) string {
	if to == "" {
		return ""
	}
	return " -> " + to
}

type powerState struct {
	published, twice, lost, unfinished, reported, void int
	problems                                           []string
	notes                                              []string // unfinished files the daemon named in a warning
}

// check looks at every file: published once (the simulator's count by
// content), its content somewhere, finished.
func (r *powerRig) check() powerState {
	var st powerState
	pubs := r.e.sim.PublishesByHash()
	said := r.warnings()
	for _, f := range r.files {
		name := filepath.Base(f.rel)
		n := pubs[f.sha]
		if n > 1 {
			st.twice += n - 1
			st.problems = append(st.problems, fmt.Sprintf("TWICE %s (%d splats)", name, n))
		}
		loc := r.locate(f)
		if f.void != "" && (loc == "" || n == 0 || !r.finished(f)) {
			st.void++
			st.notes = append(st.notes, fmt.Sprintf("NOT JUDGED %s (%s)", name, f.void))
			continue
		}
		if n >= 1 {
			st.published++
		}
		switch {
		case loc == "":
			st.lost++
			st.problems = append(st.problems, fmt.Sprintf("LOST %s (its content is nowhere; %d splats)", name, n))
		case n == 0:
			st.lost++
			st.problems = append(st.problems, fmt.Sprintf("NOT PUBLISHED %s (so far; at %s)", name, r.relName(loc)))
		case !r.finished(f) && said(name) != "":
			st.reported++
			st.notes = append(st.notes, fmt.Sprintf("UNFINISHED BUT REPORTED %s (so far: %s; the daemon said %q)", name, r.whyUnfinished(f, loc), said(name)))
		case !r.finished(f):
			st.unfinished++
			st.problems = append(st.problems, fmt.Sprintf("UNFINISHED %s (so far: %s; not named in any warning)", name, r.whyUnfinished(f, loc)))
		}
	}
	return st
}

// warnings returns a lookup of the last warning or error line of the
// daemon's log (every run) that names a file.
func (r *powerRig) warnings() func(name string) string {
	b, _ := os.ReadFile(r.e.logPath)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			lines = append(lines, l)
		}
	}
	return func(name string) string {
		for i := len(lines) - 1; i >= 0; i-- {
			if !strings.Contains(lines[i], name) {
				continue
			}
			var ev struct{ Message, Error string }
			if json.Unmarshal([]byte(lines[i]), &ev) != nil {
				return oneLineTrunc(lines[i], 160)
			}
			return oneLineTrunc(ev.Message+": "+ev.Error, 160)
		}
		return ""
	}
}

func (r *powerRig) relName(p string) string {
	for _, f := range []*lazyfs.FS{r.a, r.b} {
		if rel, err := filepath.Rel(f.Backing(), p); err == nil && !strings.HasPrefix(rel, "..") {
			return f.Name() + ":" + rel
		}
	}
	return p
}

// whyUnfinished describes an unfinished file: where its content is, and
// the receipts beside it and at its target.
func (r *powerRig) whyUnfinished(f powerFile, loc string) string {
	out := "content at " + r.relName(loc)
	for _, p := range append([]string{filepath.Join(r.a.Backing(), f.rel)}, r.candidates(f)[0]) {
		if rc, err := readReceipt(p); err == nil {
			out += fmt.Sprintf(", receipt %s %s", r.relName(after.ReceiptPath(p)), rc.Status)
		}
	}
	return out
}

// verdict fills the result from the final state, the daemon stopped.
func (r *powerRig) verdict(cuts int, byKind map[string]int, idle, failedStarts, exits int) {
	e := r.e
	res := &e.res
	res.Files = len(r.files) // less the files not judged, below
	if err := checkBolt(filepath.Join(r.a.Backing(), r.state, queue.FileName)); err != nil {
		e.problem("state file: %v", err)
	}
	st := r.check()
	res.Files -= st.void
	res.Published, res.Duplicates, res.Lost = st.published, st.twice, st.lost
	if st.unfinished > 0 {
		e.problem("%d files published but not finished (not moved, or no done receipt), and not named in any warning", st.unfinished)
	}
	if failedStarts > 0 {
		e.problem("%d failed starts after a cut", failedStarts)
	}
	if exits > 0 {
		e.problem("the daemon exited on its own %d times", exits)
	}
	var kinds []string
	for _, k := range powerKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	done := idle
	for _, n := range byKind {
		done += n
	}
	if done < cuts {
		e.problem("only %d of %d cuts were made", done, cuts)
	}
	res.Summary = fmt.Sprintf("power-cut: cuts %d (%s, idle %d), files %d, lost %d, published twice %d, failed starts %d, exits on its own %d, unfinished %d (silent %d, named in a warning %d), not judged %d, seed %d (torture -seed %d with the same -only)",
		done, strings.Join(kinds, ", "), idle, len(r.files), st.lost, st.twice, failedStarts, exits, st.unfinished+st.reported, st.unfinished, st.reported, st.void, e.seed, e.o.Seed)
	for _, p := range st.problems {
		e.problem("%s", p)
	}
	for _, n := range st.notes {
		e.note("at the end: %s", n)
	}
}

// shutdown kills the daemon, unmounts both file systems and closes the
// front; it runs however the scenario ended.
func (r *powerRig) shutdown() {
	r.m.Arm(nil)
	r.kill()
	r.m.Release()
	for _, f := range []*lazyfs.FS{r.a, r.b} {
		if err := f.Unmount(); err != nil {
			r.e.problem("%v", err)
		}
	}
	if r.frontClose != nil {
		r.frontClose()
	}
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

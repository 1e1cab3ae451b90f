package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// runFreshState: every file is published, then a second daemon starts with
// a new, empty state directory on the same folder (a scratch state_dir, a
// reinstall, a container without its volume). It must publish nothing: the
// receipts prove each file published, so each is adopted as done.
func runFreshState(ctx context.Context, e *tenv) error {
	if err := e.setup(apisim.Options{}, DaemonConfig{}); err != nil {
		return err
	}
	files := e.count(6, 20)
	if err := e.start(); err != nil {
		return err
	}
	if err := e.writeFiles(0, files, 200); err != nil {
		return err
	}
	if !e.waitFinal(ctx, e.timeout()) {
		return errors.New("the first daemon did not publish every file")
	}
	e.stop()
	before := e.sim.Stats().Publishes

	e.cfg.StateDir = filepath.Join(e.dir, "state-new")
	var err error
	if e.cfgPath, err = e.cfg.Write(); err != nil {
		return err
	}
	if err := e.start(); err != nil {
		return err
	}
	// Done when the new state holds a done job for every file.
	adopted := 0
	end := time.Now().Add(e.timeout())
	for time.Now().Before(end) && ctx.Err() == nil {
		jobs, err := e.jobsOf(ctx, "done")
		if err == nil {
			adopted = 0
			for _, j := range jobs {
				if j.Adopted {
					adopted++
				}
			}
			if len(jobs) == files {
				break
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	again := e.sim.Stats().Publishes - before
	e.note("new state directory on %d published files: %d adopted from their receipts, %d published again (target 0)", files, adopted, again)
	if again != 0 {
		e.problem("%d files published again by a daemon with a new state directory", again)
	}
	if adopted != files {
		e.problem("only %d of %d files adopted from their receipts", adopted, files)
	}
	e.verdict()
	return nil
}

// runUnremovableMove: on_success: move, and one file cannot be removed
// from the inbox (immutable, as a folder the daemon may not write would
// be). The publish succeeds; the move must leave exactly one copy (the
// source: none in success_dir, however often it is retried, across a
// restart), show its error in `splatd jobs`, and leave the daemon ready
// but degraded.
func runUnremovableMove(ctx context.Context, e *tenv) error {
	done := filepath.Join(e.dir, "done")
	if err := e.setup(apisim.Options{}, DaemonConfig{After: fmt.Sprintf("{on_success: move, success_dir: %s, receipt: true}", done)}); err != nil {
		return err
	}
	if err := e.writeFile(0, 200); err != nil {
		return err
	}
	src := e.files[0]
	if out, err := exec.CommandContext(ctx, "chattr", "+i", src).CombinedOutput(); err != nil {
		return &skipError{reason: fmt.Sprintf("cannot make a file immutable (chattr +i: %v %s)", err, strings.TrimSpace(string(out)))}
	}
	defer exec.Command("chattr", "-i", src).Run()
	for round := 1; round <= 2; round++ { // the second round is a restart
		failedBefore := e.logCount("after-action failed")
		if err := e.start(); err != nil {
			return err
		}
		var failing *jobView
		end := time.Now().Add(e.timeout())
		// Each round waits for a fresh failed attempt (a restart runs the
		// after-action again at once), so the count below never sees a
		// copy in the making.
		for failing == nil && time.Now().Before(end) && ctx.Err() == nil {
			if e.logCount("after-action failed") == failedBefore {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			if jobs, err := e.jobsOf(ctx, "done"); err == nil {
				for _, j := range jobs {
					if j.AfterAction == "move" && j.AfterError != "" {
						failing = &j
					}
				}
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
		if failing == nil {
			e.problem("round %d: `splatd jobs` never showed the failed move", round)
		} else if round == 1 {
			e.note("splatd jobs: job %d after-action %s failed: %s", failing.ID, failing.AfterAction, failing.AfterError)
		}
		code, body := readyz(e)
		if code != http.StatusOK || !strings.HasPrefix(body, "degraded: ") {
			e.problem("round %d: /readyz = %d %q, want 200 degraded: …", round, code, strings.TrimSpace(body))
		} else if round == 1 {
			e.note("/readyz: 200 %s", oneLineTrunc(body, 120))
		}
		copies := countFiles(done)
		if _, err := os.Stat(src); err == nil {
			copies++
		}
		e.note("round %d: %d copy of the file (the source; %d in success_dir)", round, copies, countFiles(done))
		if copies != 1 {
			e.problem("round %d: %d copies of the file, want 1", round, copies)
		}
		if round == 1 {
			e.stop()
		}
	}
	e.verdict()
	return nil
}

// logCount counts the daemon log lines (every run so far) holding s.
func (e *tenv) logCount(s string) int {
	b, err := os.ReadFile(e.logPath)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

func readyz(e *tenv) (int, string) {
	addr, err := e.d.MetricsAddr(5 * time.Second)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := newHTTPClient().Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func oneLineTrunc(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// runToken401: the token is revoked in the middle of a run and restored
// 8 s later. The daemon must pause (a handful of requests while revoked,
// /readyz not ready), resume after the restore and publish every file with
// no failed job.
func runToken401(ctx context.Context, e *tenv) error {
	if err := e.setup(apisim.Options{}, DaemonConfig{}); err != nil {
		return err
	}
	files := e.count(6, 20)
	if err := e.start(); err != nil {
		return err
	}
	token := e.sim.Token()
	// The first files go through with a valid token.
	if err := e.writeFiles(0, files/2, 200); err != nil {
		return err
	}
	if !e.waitFinal(ctx, 30*time.Second) {
		return errors.New("first half did not finish with a valid token")
	}
	before := e.sim.Stats()
	e.sim.SetTokens() // revoke: every request is refused 401
	if err := e.writeFiles(files/2, files-files/2, 200); err != nil {
		return err
	}
	const revoked = 8 * time.Second
	sleepCtx(ctx, revoked/2)
	notReady := false
	if addr, err := e.d.MetricsAddr(time.Second); err == nil {
		if resp, err := httpGet("http://" + addr + "/readyz"); err == nil {
			notReady = resp != 200
		}
	}
	sleepCtx(ctx, revoked/2)
	during := e.sim.Stats()
	e.sim.SetTokens(token)
	reqs := 0
	for _, r := range []string{apisim.RouteSignedURL, apisim.RoutePublish, apisim.RouteGetSplat} {
		reqs += during.Total(r) - before.Total(r)
	}
	e.note("while revoked (%s): %d API requests, %d answered 401; /readyz not ready: %v", revoked, reqs, during.Unauthorized-before.Unauthorized, notReady)
	if during.Unauthorized == before.Unauthorized {
		e.problem("no 401 was seen while the token was revoked: the files were not worked on")
	}
	if reqs > 2*e.cfg.Workers+2 {
		e.problem("%d API requests while the token was revoked: the daemon did not pause", reqs)
	}
	if !notReady {
		e.problem("/readyz said ready while the API refused the token")
	}
	restored := time.Now()
	// The prober's first probe comes 15–30 s after the pause.
	if !e.waitFinal(ctx, 60*time.Second) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished within 60 s of the restore", f, files)
	} else {
		e.note("all files finished %s after the restore", time.Since(restored).Round(100*time.Millisecond))
	}
	e.verdict()
	return nil
}

func httpGet(url string) (int, error) {
	cl := newHTTPClient()
	resp, err := cl.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

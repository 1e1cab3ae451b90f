package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
)

// TestSelectJobs: by default every live job and the last recentFinished
// finished ones; -state/-all every job; -limit the most recently updated.
func TestSelectJobs(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var views []daemon.JobView
	for i := 1; i <= 30; i++ {
		stage := "done"
		switch {
		case i%10 == 0:
			stage = "queued"
		case i == 5:
			stage = "held"
		case i == 7:
			stage = "canceled"
		}
		views = append(views, daemon.JobView{ID: uint64(i), Stage: stage, UpdatedAt: t0.Add(time.Duration(i) * time.Minute)})
	}
	ids := func(vs []daemon.JobView) []uint64 {
		var out []uint64
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	shown, hidden := selectJobs(views, false, 0)
	want := []uint64{5, 10, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30}
	if !slices.Equal(ids(shown), want) || hidden != 30-3-1-recentFinished {
		t.Errorf("default: %v (hidden %d), want %v: live jobs, held, the last %d finished", ids(shown), hidden, want, recentFinished)
	}
	if shown, hidden := selectJobs(views, true, 0); len(shown) != 30 || hidden != 0 {
		t.Errorf("every: %d jobs, hidden %d", len(shown), hidden)
	}
	if shown, _ := selectJobs(views, true, 3); !slices.Equal(ids(shown), []uint64{28, 29, 30}) {
		t.Errorf("-limit 3: %v, want the 3 most recently updated", ids(shown))
	}
	if shown, _ := selectJobs(views, false, 2); !slices.Equal(ids(shown), []uint64{29, 30}) {
		t.Errorf("default -limit 2: %v", ids(shown))
	}
}

// TestJobsActivityText: `splatd jobs` shows a job's stage as stored and
// what it does in it in the words of the page (metrics.Activity): an
// upload of a signed job, a queued job's hash, a job waiting for its next
// try; "-" for a job doing nothing more than its stage says.
func TestJobsActivityText(t *testing.T) {
	now := time.Now()
	up := daemon.ViewOf(state.Job{ID: 3, File: state.File{Path: "/in/big.ply", Size: 3 << 30}, Stage: state.Signed, CreatedAt: now},
		&uploader.Progress{Sent: 1 << 30, Size: 3 << 30, Rate: 24 << 20, ETA: 85 * time.Second})
	wait := daemon.ViewOf(state.Job{ID: 5, File: state.File{Path: "/in/w.ply"}, Stage: state.Ready, CreatedAt: now, NextAttempt: now.Add(30 * time.Second), Failure: state.Failure{LastError: "HTTP 503"}}, nil)
	done := daemon.ViewOf(state.Job{ID: 6, File: state.File{Path: "/in/d.ply"}, Stage: state.Done, CreatedAt: now}, nil)
	var b strings.Builder
	printJobs(&b, []daemon.JobView{up, wait, done}, now)
	for _, want := range []string{
		"3 signed 0 0s uploading 1.0 GiB of 3.0 GiB (33 %), 24.0 MiB/s, ETA 85 s /in/big.ply",
		"5 ready 0 0s next try in 30 s /in/w.ply HTTP 503",
		"6 done 0 0s - /in/d.ply",
	} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), want) {
			t.Errorf("splatd jobs:\n%s\nwant a line with %q", b.String(), want)
		}
	}
	if strings.Contains(b.String(), "uploading  ") {
		t.Errorf("a stage reads uploading:\n%s", b.String())
	}
}

// TestJobsWatch: -watch prints the list again and again until interrupted
// (here from the state file: no daemon runs), and exits 0.
func TestJobsWatch(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("state_dir: %s\nwatch: [{path: %s}]\n", filepath.Join(dir, "state"), dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, &cli{stdout: out, stderr: errOut, getenv: func(string) string { return "" }},
			[]string{"jobs", "-config", cfg, "-watch", "-interval", "10ms"})
	}()
	deadline := time.After(e2eWait)
	// Three whole lists (their column headers), not just three headings:
	// the interrupt may cut the listing that follows a heading.
	for strings.Count(out.String(), "ID  STAGE") < 3 {
		select {
		case code := <-done:
			t.Fatalf("jobs -watch ended by itself: exit %d, stdout %q, stderr %q", code, out, errOut)
		case <-deadline:
			t.Fatalf("jobs -watch printed %q", out)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("jobs -watch after interrupt: exit %d", code)
	}
	if n := strings.Count(out.String(), "ID  STAGE"); n < 3 {
		t.Errorf("%d lists printed:\n%s", n, out)
	}
	if n := strings.Count(errOut.String(), "not running"); n != 1 {
		t.Errorf("the note that splatd is not running printed %d times: %q", n, errOut)
	}
}

// TestCLINits: --config before the command is the command's -config; a
// missing config hints at -config and config.example.yaml; demo -h names
// -protocol; config check -h says what -probe checks.
func TestCLINits(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeConfig(t, cfg, fmt.Sprintf("state_dir: %s\nwatch: [{path: %s}]\n", filepath.Join(dir, "state"), dir))
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		env := func(k string) string {
			if k == "SPLATD_TOKEN" {
				return "tok"
			}
			return ""
		}
		code := dispatch(context.Background(), &cli{stdout: &out, stderr: &errOut, getenv: env}, args)
		return code, out.String(), errOut.String()
	}
	for _, args := range [][]string{{"--config", cfg, "config", "check"}, {"-config", cfg, "config", "check"}, {"--config=" + cfg, "config", "check"}} {
		if code, out, errOut := run(args...); code != 0 || !strings.Contains(out, "state_dir: "+filepath.Join(dir, "state")) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, _, errOut := run("--config"); code != exitUsage || !strings.Contains(errOut, "needs a FILE") {
		t.Errorf("--config alone: exit %d, %q", code, errOut)
	}
	code, _, errOut := run("run", "-config", filepath.Join(dir, "missing.yaml"))
	if code != exitUsage || !strings.Contains(errOut, "-config FILE") || !strings.Contains(errOut, "config.example.yaml") {
		t.Errorf("run with a missing config: exit %d, %q", code, errOut)
	}
	if _, out, _ := run("demo", "-h"); !strings.Contains(out, "usage: splatd demo [-keep] [-dir DIR] [-protocol legacy|v1]") {
		t.Errorf("demo -h:\n%s", out)
	}
	if _, out, _ := run("config", "-h"); !strings.Contains(out, "storage host") || !strings.Contains(out, "accepts the token") {
		t.Errorf("config -h:\n%s", out)
	}
}

// TestJobsTableEscapesNames: a file name (and an error quoting it) with a
// newline, a control character and an ANSI escape, as a folder writer may
// choose, reaches the terminal escaped: one line per job, no raw escape.
func TestJobsTableEscapesNames(t *testing.T) {
	t.Parallel()
	name := "/in/nl\nname\x01\x1b[31m.ply"
	var b strings.Builder
	printJobs(&b, []daemon.JobView{{ID: 1, File: name, Stage: "failed", Error: name + ": invalid\x1b[2J"}}, time.Now())
	out := b.String()
	if strings.ContainsAny(out, "\x01\x1b") || strings.Count(out, "\n") != 2 {
		t.Errorf("jobs table with a hostile name:\n%q\nwant a header and one line, no control character", out)
	}
	if !strings.Contains(out, `/in/nl\nname\x01\x1b[31m.ply`) {
		t.Errorf("jobs table %q does not show the name escaped", out)
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
)

// TestJobsShowParked: `splatd jobs` shows a parked job's reason, in the
// table and in -json.
func TestJobsShowParked(t *testing.T) {
	t.Parallel()
	j := state.Job{ID: 7, Path: "/watch/a.ply", Stage: state.Signed, Parked: "another daemon is uploading this content's session (1 of 4 parts stored)",
		NextAttempt: time.Now().Add(time.Minute)}
	v := daemon.ViewOf(j, nil)
	if v.Parked != j.Parked {
		t.Fatalf("view %+v", v)
	}
	var b bytes.Buffer
	printJobs(&b, []daemon.JobView{v}, time.Now())
	if !strings.Contains(b.String(), "PARKED: another daemon is uploading") {
		t.Errorf("jobs table:\n%s", b.String())
	}
}

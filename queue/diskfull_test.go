package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/state"
)

// smallFS mounts a tmpfs of size bytes on a new folder; the test is skipped
// where mounting is not allowed (not root, no tmpfs).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// fill writes to a file in dir until the file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestFullDiskCancelForget: on a full state file system, cancel and forget
// of jobs with large records still commit (they free space, add none).
// Without lighten, each forget failed with "no space left on device".
func TestFullDiskCancelForget(t *testing.T) {
	t.Parallel()
	dir := smallFS(t, "8m")
	clk := newClock()
	s := open(t, dir, Options{Now: clk.Now})
	big := map[string]any{"notes": strings.Repeat("n", 400<<10)}
	var cs []Candidate
	for i := range 6 {
		cs = append(cs, cand(fmt.Sprintf("/srv/in/%d.ply", i), 100, 1))
	}
	if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	var ids []uint64
	for i := range 6 {
		j := claim(t, s, now)
		j = advance(t, s, j, state.Ready, now, func(j *state.Job) {
			j.SHA256 = fmt.Sprintf("%064x", i)
			j.Params.Settings = big
		})
		if i < 3 {
			j = advance(t, s, j, state.Failed, now, nil)
			s.Release(j.ID)
		}
		ids = append(ids, j.ID)
	}
	fill(t, dir)
	if err := s.Ping(); err == nil {
		t.Log("a ping still commits on the full disk")
	} else {
		t.Logf("ping on the full disk: %v", err)
	}
	for _, id := range ids[3:] {
		if _, err := s.Cancel(id); err != nil {
			t.Errorf("cancel %d on a full disk: %v", id, err)
		}
	}
	for _, id := range ids[:3] {
		if _, err := s.Forget(id); err != nil {
			t.Errorf("forget %d on a full disk: %v", id, err)
		}
	}
}

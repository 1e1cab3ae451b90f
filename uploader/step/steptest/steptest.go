// Package steptest runs a protocol's steps without a pool, for the
// protocols' own tests: a Pool over plain files and an Env on a simulator.
package steptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step"
)

// Pool is a step.Pool over plain files, recording what steps ask of it.
type Pool struct {
	mu      sync.Mutex
	changed []string // why each Changed was called
	sent    int64    // the last Report
}

func (p *Pool) CheckName(j state.Job) (fs.FileInfo, error) { return os.Lstat(j.Path) }

func (p *Pool) UploadFile(j state.Job) (*step.File, fs.FileInfo, error) {
	f, err := os.Open(j.Path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !step.IsRecorded(fi, j) {
		f.Close()
		return nil, fi, nil
	}
	return &step.File{F: f, Info: fi, Want: j.SHA256, Size: j.Size}, nil, nil
}

func (p *Pool) Changed(j state.Job, fi fs.FileInfo, why string) (state.Job, error) {
	p.mu.Lock()
	p.changed = append(p.changed, why)
	p.mu.Unlock()
	if err := j.Reset(state.ResetChanged, time.Now()); err != nil {
		return j, err
	}
	j.Size, j.ModTime = fi.Size(), fi.ModTime()
	return j, nil
}

func (p *Pool) Commit(_ context.Context, j state.Job, _ state.Stage) (state.Job, error) {
	return j, nil
}

func (p *Pool) Hook(string, state.Job) error { return nil }

func (p *Pool) UntilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

func (p *Pool) Report(_ state.Job, sent, _ int64) {
	p.mu.Lock()
	p.sent = sent
	p.mu.Unlock()
}

func (p *Pool) EndReport(uint64) {}

// Changes is why each Changed was called.
func (p *Pool) Changes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.changed...)
}

// Sent is the bytes of the last Report.
func (p *Pool) Sent() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// Sim starts a simulator with o (rate limits lifted unless o sets them)
// and returns it with a client of it.
func Sim(t *testing.T, o apisim.Options) (*apisim.Server, *api.Client) {
	t.Helper()
	if o.Limits == nil {
		o.Limits = map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}
	}
	if o.ProcessingDelay == 0 {
		o.ProcessingDelay = time.Millisecond
	}
	sim, err := apisim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	c, err := api.NewClient(api.ClientOptions{BaseURL: sim.URL(), Token: sim.Token(), RootCAs: sim.CertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// Env is a step environment on c over pool, with polls due at once.
func Env(c *api.Client, pool step.Pool) *step.Env {
	return &step.Env{Pool: pool, Client: c, Log: zerolog.Nop(), Now: time.Now, Policy: state.Policy{},
		Timing: step.Timing{URLMaxAge: time.Hour, PollInterval: time.Millisecond, PollMaxInterval: time.Millisecond, PollTimeout: time.Minute}}
}

// ReadyJob writes a PLY of one vertex and pad more bytes and returns its
// job in stage ready.
func ReadyJob(t *testing.T, pad int) state.Job {
	t.Helper()
	data := []byte("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n")
	data = append(data, make([]byte, 12+pad)...)
	path := filepath.Join(t.TempDir(), "scene.ply")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return state.Job{ID: 1, Stage: state.Ready, File: state.File{Path: path, Size: fi.Size(), ModTime: fi.ModTime(),
		SHA256: hex.EncodeToString(sum[:]), Kind: "ply"}, Params: state.PublishParams{Title: "scene"}}
}

// Stepper is one protocol's Step.
type Stepper interface {
	Step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error)
}

// Run steps j until it reaches stage until or a step fails, and returns
// the stage after each step.
func Run(t *testing.T, p Stepper, c *pace.Caller, j state.Job, until state.Stage) (state.Job, []state.Stage, error) {
	t.Helper()
	var seen []state.Stage
	for range 50 {
		if j.Stage == until {
			return j, seen, nil
		}
		next, err := p.Step(context.Background(), c, j)
		if err != nil {
			return next, seen, err
		}
		j = next
		seen = append(seen, j.Stage)
	}
	t.Fatalf("job still in %s after 50 steps", j.Stage)
	return j, seen, nil
}

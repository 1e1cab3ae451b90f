package uploader

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/fleet"
	"github.com/splatd/splatd/uploader/legacy"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step"
	v1 "github.com/splatd/splatd/uploader/v1"
)

// Protocol is one API's steps (uploader/legacy, uploader/v1) from ready to
// processing: Step performs the side effect of j's stage, its requests
// paced by t, and returns the job to commit; an error goes to the one
// retry rule. The queued stage's check is the pool's own (Pool.step).
type Protocol interface {
	Step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error)
}

// Protocols of PoolOptions.Protocol.
const (
	ProtocolLegacy = "legacy"
	ProtocolV1     = state.ProtocolV1
)

// PeerOutcome is the outcome of a job's content that another daemon of the
// fleet reached, as its receipt says.
type PeerOutcome = fleet.Outcome

// Fleet names the daemons of a fleet on a job's watch folder.
type Fleet = fleet.Members

// ErrNoPeerReceipt is Peers.Receipt's answer while the job's file has no
// receipt that proves its content published (yet).
var ErrNoPeerReceipt = fleet.ErrNoReceipt

// fillProtocol checks and defaults the protocol options.
func (o *PoolOptions) fillProtocol() error {
	switch o.Protocol {
	case "":
		o.Protocol = ProtocolLegacy
	case ProtocolLegacy, ProtocolV1:
	default:
		return fmt.Errorf("uploader: api.protocol must be %q or %q, not %q", ProtocolLegacy, ProtocolV1, o.Protocol)
	}
	switch {
	case o.ParallelParts == 0:
		o.ParallelParts = Defaults().ParallelParts
	case o.ParallelParts < 1 || o.ParallelParts > v1.MaxParallelParts:
		return fmt.Errorf("uploader: upload.parallel_parts must be 1..%d, not %d", v1.MaxParallelParts, o.ParallelParts)
	}
	return nil
}

// newProtocols builds the pool's step environment, its fleet view and
// both protocols.
func (p *Pool) newProtocols() {
	o := &p.o
	t := o.Timing
	p.env = &step.Env{Pool: stepPool{p}, Client: o.Client, Log: p.log, Now: o.Now, Policy: p.policy, Timing: step.Timing{
		URLMaxAge: t.URLMaxAge, PeerWait: t.PeerWait,
		PollInterval: t.Poll.Interval, PollMaxInterval: t.Poll.MaxInterval, PollTimeout: t.Poll.Timeout,
	}}
	fo := fleet.Options{V1: o.Protocol == ProtocolV1, Now: o.Now, PollInterval: t.Poll.Interval, Log: p.log}
	if o.Peers != nil {
		fo.Receipts, fo.Members = o.Peers, o.Peers.Fleet()
	}
	p.fleet = fleet.New(fo)
	p.legacy = legacy.New(p.env, func() bool { return p.publish.Load().onUncertain == UncertainHold })
	p.v1 = v1.New(p.env, p.fleet, o.ParallelParts)
}

// protocolOf is the protocol j advances by: a job that has begun under v1
// keeps it whatever the configuration says now, and one that has not yet
// left ready follows the configuration.
func (p *Pool) protocolOf(j state.Job) Protocol {
	if j.Protocol == state.ProtocolV1 || j.Protocol == "" && j.Stage == state.Ready && p.o.Protocol == ProtocolV1 {
		return p.v1
	}
	return p.legacy
}

// step performs the side effect of j's stage: the pool's own check while
// j is queued, its protocol's step after.
func (p *Pool) step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if j.Stage == state.Queued {
		j.Parked = "" // each check says again why the job waits, if it does
		return p.content.Check(ctx, j)
	}
	return p.protocolOf(j).Step(ctx, t, j)
}

// PeerWaiting counts the queued jobs parked on a fleet peer's share.
func (p *Pool) PeerWaiting() int { return p.fleet.Waiting() }

// stepPool is the pool as its protocols' steps see it (step.Pool).
type stepPool struct{ p *Pool }

func (s stepPool) CheckName(j state.Job) (fs.FileInfo, error) { return s.p.content.CheckName(j) }
func (s stepPool) UploadFile(j state.Job) (*step.File, fs.FileInfo, error) {
	return s.p.content.UploadFile(j)
}
func (s stepPool) Changed(j state.Job, fi fs.FileInfo, why string) (state.Job, error) {
	return s.p.content.Changed(j, fi, why)
}
func (s stepPool) Commit(ctx context.Context, j state.Job, from state.Stage) (state.Job, error) {
	return s.p.commit(ctx, j, from)
}
func (s stepPool) Hook(point string, j state.Job) error { return s.p.hook(point, j) }
func (s stepPool) UntilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.p.untilDrain(ctx)
}
func (s stepPool) Report(j state.Job, sent, size int64) {
	s.p.meters.Upload(j.ID, &Progress{Path: j.Path, Sent: sent, Size: size})
}
func (s stepPool) EndReport(id uint64) { s.p.meters.Upload(id, nil) }

var _ step.Pool = stepPool{}

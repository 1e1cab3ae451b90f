package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/fleet"
	v1 "github.com/splatd/splatd/uploader/v1"
)

// v1PartSize is the simulator's partSize in these tests: small, so that a
// file of a few hundred KB has several parts.
const v1PartSize = 64 << 10

// newV1Env is a worker environment whose simulator cuts v1 uploads into
// v1PartSize parts.
// crashBeforeCreate runs one v1 worker until it is about to send its first
// create, and dies there (the create's intent is committed, not sent).
func (e *workerEnv) crashBeforeCreate() {
	e.t.Helper()
	o := e.v1Options(1)
	o.workerHook = func(point string, j state.Job) error {
		if point == "v1:create" {
			return errors.New("killed before the create")
		}
		return nil
	}
	if err := e.run(o); !errors.Is(err, errWorkerCrash) {
		e.t.Fatalf("run: %v, want the simulated crash before the create", err)
	}
}

func newV1Env(t *testing.T, so apisim.Options) *workerEnv {
	t.Helper()
	if so.PartSize == 0 {
		so.PartSize = v1PartSize
	}
	return newWorkerEnv(t, so)
}

// v1Options are the pool options of e under the v1 protocol. PeerWait is
// long: a test that must not wait for a peer would time out instead.
func (e *workerEnv) v1Options(workers int) PoolOptions {
	o := e.options(workers)
	o.Protocol = ProtocolV1
	o.ParallelParts = 4
	o.Timing.PeerWait = time.Hour
	return o
}

// writeParts writes a valid PLY of about parts·v1PartSize bytes (its last
// part shorter); n picks distinct content.
func (e *workerEnv) writeParts(name string, parts int) string {
	e.t.Helper()
	const splat = 62 * 4 // WritePLY's bytes per splat
	return e.writePLY(name, (parts*v1PartSize-v1PartSize/2)/splat)
}

// job returns the only job of path.
func (e *workerEnv) job(path string) state.Job {
	e.t.Helper()
	for _, j := range e.jobs() {
		if j.Path == path {
			return j
		}
	}
	e.t.Fatalf("no job for %s", path)
	return state.Job{}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkV1Once checks that each file's content made exactly one splat and
// that its job is done with that splat and a complete v1 record.
func (e *workerEnv) checkV1Once(paths ...string) {
	e.t.Helper()
	byHash := e.sim.PublishesByHash()
	for _, p := range paths {
		j := e.job(p)
		if j.Stage != state.Done {
			e.t.Errorf("%s: stage %s (%s), want done", p, j.Stage, j.FailReason)
			continue
		}
		if n := byHash[workerFileSHA(e.t, p)]; n != 1 {
			e.t.Errorf("%s: published %d times, want once", p, n)
		}
		if j.Protocol != state.ProtocolV1 || j.V1 == nil || j.SplatID == "" || j.ViewerURL == "" {
			e.t.Errorf("%s: v1 record incomplete: %+v", p, j)
			continue
		}
		if got := j.V1.Stored(); got != j.V1.Parts || j.V1.Parts != v1.PartCount(j.Size, j.V1.PartSize) {
			e.t.Errorf("%s: %d of %d parts stored", p, got, j.V1.Parts)
		}
	}
	if st := e.sim.Stats(); st.UnknownFields != 0 || st.KeyMismatches != 0 {
		e.t.Errorf("unknown fields %d (%v), key mismatches %d", st.UnknownFields, st.UnknownFieldNames, st.KeyMismatches)
	}
}

// session returns the simulator's record and byte counters of the session
// whose key is key.
func (e *workerEnv) session(key string) (apisim.SessionRecord, apisim.SessionStats) {
	e.t.Helper()
	for _, s := range e.sim.Sessions() {
		if s.IdempotencyKey == key {
			return s, e.sim.Stats().Sessions[s.ID]
		}
	}
	e.t.Fatalf("no session with key %s", key)
	return apisim.SessionRecord{}, apisim.SessionStats{}
}

func TestV1PublishesMultipartOnce(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	big := e.writeParts("big.ply", 5)
	small := e.writePLY("small.ply", 10) // one part
	e.enqueue(big, small)
	if err := e.run(e.v1Options(2)); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(big, small)
	j := e.job(big)
	size := fileSize(t, big)
	wantKey := "splatd-" + workerFileSHA(t, big) + "-g0-s1"
	if j.V1.Key != wantKey || j.V1.Parts != 5 || !j.V1.Owned || j.V1.Creates != 1 || j.V1.EditURL == "" {
		t.Errorf("session record: %+v, want key %s and 5 parts", j.V1, wantKey)
	}
	rec, ss := e.session(wantKey)
	if rec.SourceFormat != "ply" || rec.ContentLength != size || rec.Title != "big" || rec.ClientID != "splatd" || rec.Status != "completed" {
		t.Errorf("server's session: %+v", rec)
	}
	if ss.PartPuts != 5 || ss.PartBytes != size || ss.BytesReceived != size || ss.PartsResent != 0 {
		t.Errorf("storage counters %+v, want 5 parts of %d bytes in all", ss, size)
	}
	if st := e.sim.Stats(); st.V1Splats != 2 || st.Publishes != 0 || st.Creates != 2 || st.Completes != 2 {
		t.Errorf("stats: %d v1 splats, %d legacy publishes, %d creates, %d completes", st.V1Splats, st.Publishes, st.Creates, st.Completes)
	}
}

func TestV1OptionsChecked(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	for _, o := range []PoolOptions{
		{Protocol: "v2"},
		{Protocol: ProtocolV1, ParallelParts: 17},
		{Protocol: ProtocolV1, ParallelParts: -1},
	} {
		o.Store, o.Client = e.store, e.client
		if _, err := NewPool(o); err == nil {
			t.Errorf("NewPool accepted protocol %q, parallel parts %d", o.Protocol, o.ParallelParts)
		}
	}
}

// TestV1CrashResendsOnlyMissingParts kills the pool after two parts were
// committed, with more in flight; the restart reads the session and sends
// only the parts the server lacks.
func TestV1CrashResendsOnlyMissingParts(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("crash.ply", 12)
	size := fileSize(t, path)
	e.enqueue(path)
	o := e.v1Options(1)
	var parts atomic.Int32
	o.workerHook = func(point string, j state.Job) error {
		if point == "v1:part" && parts.Add(1) == 2 {
			return errors.New("killed")
		}
		return nil
	}
	if err := e.run(o); !errors.Is(err, errWorkerCrash) {
		t.Fatalf("first run: %v, want the simulated crash", err)
	}
	e.reopen()
	j := e.job(path)
	if j.Stage != state.Signed || j.V1.Stored() != 2 {
		t.Fatalf("after the crash: stage %s with %d parts committed", j.Stage, j.V1.Stored())
	}
	_, before := e.session(j.V1.Key)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(path)
	_, after := e.session(j.V1.Key)
	resent := after.BytesReceived - size
	t.Logf("file %d bytes in %d parts; before the restart storage had received %d bytes; in all %d (%d re-sent, bound %d)",
		size, j.V1.Parts, before.BytesReceived, after.BytesReceived, resent, int64(o.ParallelParts)*v1PartSize)
	// What was in flight at the crash may be sent again (storage may even
	// finish storing such a part after the restart read the session),
	// nothing else.
	if after.PartsResent > o.ParallelParts {
		t.Errorf("%d parts that storage held were sent again", after.PartsResent)
	}
	if resent > int64(o.ParallelParts)*v1PartSize {
		t.Errorf("re-sent %d bytes, more than %d parts in flight", resent, o.ParallelParts)
	}
}

// TestV1CrashAfterComplete: the complete created the splat, the process died
// before committing it; the restart completes again (200, same splat).
func TestV1CrashAfterComplete(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("c.ply", 3)
	e.enqueue(path)
	o := e.v1Options(1)
	o.workerHook = func(point string, j state.Job) error {
		if point == "effect:publishing" && j.Stage == state.Processing {
			return errors.New("killed")
		}
		return nil
	}
	if err := e.run(o); !errors.Is(err, errWorkerCrash) {
		t.Fatalf("first run: %v, want the simulated crash", err)
	}
	e.reopen()
	if j := e.job(path); j.Stage != state.Publishing || j.Uncertain {
		t.Fatalf("after the crash: stage %s, uncertain %v", j.Stage, j.Uncertain)
	}
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(path)
	if st := e.sim.Stats(); st.Completes != 1 || st.CompleteReplays != 1 {
		t.Errorf("completes %d, replays %d; want 1 and 1", st.Completes, st.CompleteReplays)
	}
}

func TestV1LostAnswersMakeOneSplat(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{Faults: apisim.Faults{UncertainCreates: 2, UncertainCompletes: 2}})
	a, b := e.writeParts("a.ply", 3), e.writeParts("b.ply", 2)
	e.enqueue(a, b)
	if err := e.run(e.v1Options(2)); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(a, b)
	st := e.sim.Stats()
	if st.Creates != 2 || st.CreateReplays != 2 || st.Completes != 2 || st.CompleteReplays != 2 || st.V1Splats != 2 {
		t.Errorf("creates %d (replays %d), completes %d (replays %d), splats %d", st.Creates, st.CreateReplays, st.Completes, st.CompleteReplays, st.V1Splats)
	}
	for _, p := range []string{a, b} {
		// A create of ours whose answer was lost made the session: it is
		// ours, uploaded at once (PeerWait is an hour), each part once.
		j := e.job(p)
		if !j.V1.Owned || j.V1.Creates != 2 {
			t.Errorf("%s: owned %v after %d creates", p, j.V1.Owned, j.V1.Creates)
		}
		if _, ss := e.session(j.V1.Key); ss.BytesReceived != j.Size {
			t.Errorf("%s: storage received %d bytes of %d", p, ss.BytesReceived, j.Size)
		}
	}
}

// TestV1RestartSaysTheServerLostTheSession: a job restarted with parts
// committed whose session the server no longer has (a restarted
// simulator) says plainly that the server lost it, and how many parts it
// held, before it creates a new session.
func TestV1RestartSaysTheServerLostTheSession(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("lost.ply", 6)
	e.enqueue(path)
	o := e.v1Options(1)
	var parts atomic.Int32
	o.workerHook = func(point string, j state.Job) error {
		if point == "v1:part" && parts.Add(1) == 2 {
			return errors.New("killed")
		}
		return nil
	}
	if err := e.run(o); !errors.Is(err, errWorkerCrash) {
		t.Fatalf("first run: %v, want the simulated crash", err)
	}
	e.reopen()
	j := e.job(path)
	if !e.sim.ExpireUpload(j.V1.ID) {
		t.Fatalf("no session %s", j.V1.ID)
	}
	var logs lockedBuffer
	o = e.v1Options(1)
	o.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(path)
	want := fmt.Sprintf("the server lost the upload session (404), with the 2 of %d parts sent to it: creating a new session under a new key", j.V1.Parts)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, logs.String())
	}
}

// TestV1LostSessionRecreated: a session that expires or is canceled during
// the upload is replaced under a new key, committed before its create.
func TestV1LostSessionRecreated(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"expire", "cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newV1Env(t, apisim.Options{})
			path := e.writeParts("lost.ply", 6)
			e.enqueue(path)
			o := e.v1Options(1)
			var once sync.Once
			o.workerHook = func(point string, j state.Job) error {
				if point == "v1:part" {
					once.Do(func() {
						ok := false
						if how == "expire" {
							ok = e.sim.ExpireUpload(j.V1.ID)
						} else {
							ok = e.sim.CancelUpload(j.V1.ID)
						}
						if !ok {
							t.Errorf("%s: no session %s", how, j.V1.ID)
						}
					})
				}
				return nil
			}
			if err := e.run(o); err != nil {
				t.Fatal(err)
			}
			e.checkV1Once(path)
			j := e.job(path)
			sha := workerFileSHA(t, path)
			if j.V1.Attempt != 2 || j.V1.Key != "splatd-"+sha+"-g0-s2" {
				t.Errorf("session record %+v, want attempt 2", j.V1)
			}
			recs := e.sim.Sessions()
			if len(recs) != 2 || recs[0].IdempotencyKey != "splatd-"+sha+"-g0-s1" || recs[1].SplatID != j.SplatID {
				t.Errorf("sessions: %+v", recs)
			}
		})
	}
}

// TestV1SessionsLostForGoodBounded: a server that loses every session at
// its first part is met with a new session at once the first time, then
// after the retry rule's backoff, and a bounded patience fails the job
// naming the cause instead of creating sessions without end.
func TestV1SessionsLostForGoodBounded(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("lost.ply", 3)
	e.enqueue(path)
	o := e.v1Options(1)
	o.Timing.Patience[state.ProfileJob] = state.Patience{Backoff: state.Backoff{Base: 2 * time.Millisecond, Cap: 30 * time.Millisecond, Jitter: state.NoJitter}, Tries: 3}
	o.workerHook = func(point string, j state.Job) error {
		if point == "v1:part" {
			e.sim.ExpireUpload(j.V1.ID)
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.job(path)
	if j.Stage != state.Failed || !strings.Contains(j.FailReason, "the server lost 3 upload sessions of this file") {
		t.Fatalf("job %s (%q), want failed: the server lost 3 upload sessions", j.Stage, j.FailReason)
	}
	if n := len(e.sim.Sessions()); n != 3 {
		t.Errorf("%d sessions created, want 3 (the first and two after backoffs)", n)
	}
}

func TestV1StorageFaultsRetried(t *testing.T) {
	t.Parallel()
	tests := map[string]apisim.Faults{
		"expired URLs": {ExpiredPartURLs: 3},
		"part errors":  {PartErrors: 4},
		"part resets":  {PartResets: 3},
		"mixed rates":  {PartErrorRate: 0.2, PartResetRate: 0.1},
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newV1Env(t, apisim.Options{Faults: f})
			path := e.writeParts("f.ply", 8)
			e.enqueue(path)
			if err := e.run(e.v1Options(1)); err != nil {
				t.Fatal(err)
			}
			e.checkV1Once(path)
			st := e.sim.Stats()
			j := e.job(path)
			if st.PartPuts != j.V1.Parts || st.Faults == 0 {
				t.Errorf("%d parts stored for %d, %d faults", st.PartPuts, j.V1.Parts, st.Faults)
			}
			if name == "expired URLs" && st.PartURLs <= j.V1.Parts {
				t.Errorf("%d URLs signed for %d parts: refused ones were not signed again", st.PartURLs, j.V1.Parts)
			}
		})
	}
}

func TestV1TooLargeFailsWithServerMessage(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{MaxUploadSize: 100 << 10})
	path := e.writeParts("huge.ply", 3)
	e.enqueue(path)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	j := e.job(path)
	if j.Stage != state.Failed || j.LastStatus != 413 || !strings.Contains(j.FailReason, "Upload size limit exceeded") {
		t.Errorf("job %s, status %d, reason %q", j.Stage, j.LastStatus, j.FailReason)
	}
	if st := e.sim.Stats(); st.Creates != 0 || st.PartPuts != 0 || st.PartURLs != 0 {
		t.Errorf("an oversize file reached storage: %+v", st)
	}
}

func TestV1InvalidFileNeverCreates(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	bad := filepath.Join(e.files, "bad.ply")
	if err := os.WriteFile(bad, []byte("ply\nformat ascii 1.0\nelement vertex x\nend_header\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.enqueue(bad)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	if j := e.job(bad); j.Stage != state.Failed {
		t.Errorf("invalid file: %s", j.Stage)
	}
	if st := e.sim.Stats(); st.Creates != 0 || st.CreateReplays != 0 {
		t.Errorf("an invalid file reached create: %+v", st)
	}
}

// TestV1SessionFoundCompleted: a daemon with its own state finds the
// content's session already completed (by another daemon): it uploads
// nothing and takes the splat from the session when it names it (the
// generous simulator variant, turned on to check that splatd uses the id
// when a deployment adds it), else from the peer's receipt with no API call
// and no after-action of its own, else, when no receipt comes within
// PeerWait (the job parked meanwhile), from one replayed complete.
func TestV1SessionFoundCompleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		sessionID, receipt    bool
		replays, polls, parks int
	}{
		{name: "splatId in session", sessionID: true, polls: 1},
		{name: "peer receipt", receipt: true},
		{name: "no receipt: complete replayed", replays: 1, polls: 1, parks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newV1Env(t, apisim.Options{SessionSplatID: tc.sessionID})
			path := e.writeParts("done.ply", 4)
			e.enqueue(path)
			if err := e.run(e.v1Options(1)); err != nil {
				t.Fatal(err)
			}
			first := e.job(path)
			before := e.sim.Stats()
			e.stateDir = t.TempDir() // another daemon: nothing of the first one's state
			e.store = nil
			e.reopen()
			e.enqueue(path)
			o := e.v1Options(1)
			o.Timing.PeerWait = 50 * time.Millisecond
			var finishes, parks atomic.Int32
			o.After = finishFunc(func(context.Context, state.Job) error { finishes.Add(1); return nil })
			o.workerHook = func(point string, j state.Job) error {
				if strings.HasPrefix(point, "commit:") && j.Parked != "" {
					parks.Add(1)
				}
				return nil
			}
			o.Peers = receiptFunc(func(j state.Job) (PeerOutcome, error) {
				if !tc.receipt || j.SHA256 != first.SHA256 {
					return PeerOutcome{}, ErrNoPeerReceipt
				}
				return PeerOutcome{SplatID: first.SplatID, ViewerURL: first.ViewerURL, CompletedAt: first.CompletedAt, Receipt: "r"}, nil
			})
			if err := e.run(o); err != nil {
				t.Fatal(err)
			}
			j := e.job(path)
			if j.Stage != state.Done || j.SplatID != first.SplatID || j.V1.Owned || j.Parked != "" {
				t.Errorf("second daemon: %s splat %s owned %v parked %q, want done with %s", j.Stage, j.SplatID, j.V1.Owned, j.Parked, first.SplatID)
			}
			after := e.sim.Stats()
			if after.PartBytes != before.PartBytes || after.PartURLs != before.PartURLs || after.V1Splats != 1 {
				t.Errorf("second daemon sent %d bytes, signed %d URLs; %d splats", after.PartBytes-before.PartBytes, after.PartURLs-before.PartURLs, after.V1Splats)
			}
			if replays := after.CompleteReplays - before.CompleteReplays; replays != tc.replays {
				t.Errorf("%d complete replays, want %d", replays, tc.replays)
			}
			if polls := sumStatuses(after.Requests[apisim.RouteV1GetSplat]) - sumStatuses(before.Requests[apisim.RouteV1GetSplat]); polls != tc.polls {
				t.Errorf("%d splat polls, want %d", polls, tc.polls)
			}
			if got := int(parks.Load()); (got > 0) != (tc.parks > 0) {
				t.Errorf("parked %d times, want parking %v", got, tc.parks > 0)
			}
			if fin := finishes.Load(); (fin == 0) != tc.receipt {
				t.Errorf("%d after-actions (a peer's receipt: the peer's own)", fin)
			}
		})
	}
}

// sumStatuses adds up a route's answers over their statuses.
func sumStatuses(m map[int]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestV1RetryOfDoneJobRepublishes: `splatd retry` of a done job is a new
// generation: a new key, a new session, a new splat.
func TestV1RetryOfDoneJobRepublishes(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("again.ply", 2)
	e.enqueue(path)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	first := e.job(path)
	if _, err := e.store.Retry(first.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	j := e.job(path)
	if j.Stage != state.Done || j.Generation != 1 || j.SplatID == first.SplatID || !strings.HasSuffix(j.V1.Key, "-g1-s1") {
		t.Errorf("republished job: %s generation %d splat %s key %s", j.Stage, j.Generation, j.SplatID, j.V1.Key)
	}
	if st := e.sim.Stats(); st.V1Splats != 2 {
		t.Errorf("%d splats, want 2", st.V1Splats)
	}
}

// TestV1ForgetPublishesAgain: a forgotten job's content, found again, is
// published again under a new key (a new generation), not taken for the
// forgotten publish's completed session, nor parked waiting for the
// receipt of a peer that never was.
func TestV1ForgetPublishesAgain(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("forgot.ply", 2)
	e.enqueue(path)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	first := e.job(path)
	if _, err := e.store.Forget(first.ID); err != nil {
		t.Fatal(err)
	}
	e.enqueue(path)
	o := e.v1Options(1)
	// Receipts on, none there (forget removed it): a job that took the old
	// session for a peer's would wait PeerWait (an hour) for one.
	o.Peers = receiptFunc(func(state.Job) (PeerOutcome, error) { return PeerOutcome{}, ErrNoPeerReceipt })
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.job(path)
	if j.ID == first.ID || j.Stage != state.Done || j.SplatID == first.SplatID || !strings.HasSuffix(j.V1.Key, "-g1-s1") {
		t.Errorf("forgotten and found again: job %d %s splat %s (first %s) key %s", j.ID, j.Stage, j.SplatID, first.SplatID, j.V1.Key)
	}
	if st := e.sim.Stats(); st.V1Splats != 2 {
		t.Errorf("%d splats, want 2", st.V1Splats)
	}
}

// TestV1PeerStalledSessionTakenOver: a session another daemon created and
// left with one part is watched for PeerWait, then this daemon sends only
// the missing parts.
func TestV1PeerStalledSessionTakenOver(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("peer.ply", 4)
	size := fileSize(t, path)
	key := "splatd-" + workerFileSHA(t, path) + "-g0-s1"
	ctx := context.Background()
	// The peer: create under the content's key, send part 1, vanish.
	s, created, err := e.client.CreateUpload(ctx, key, api.CreateUploadRequest{SourceFormat: api.SourceFormatPLY, ContentLength: size, Title: "peer"})
	if err != nil || !created {
		t.Fatalf("peer create: %v (created %v)", err, created)
	}
	urls, err := e.client.PartURLs(ctx, s.ID, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.client.PutPart(ctx, urls.URLs[0].URL, io.NewSectionReader(f, 0, v1PartSize), v1PartSize, nil); err != nil {
		t.Fatal(err)
	}
	e.enqueue(path)
	o := e.v1Options(1)
	o.Timing.PeerWait = 30 * time.Millisecond
	var watched atomic.Int32
	o.workerHook = func(point string, j state.Job) error {
		if point == "effect:signed" && j.Stage == state.Signed && !j.V1.Owned {
			watched.Add(1)
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(path)
	j := e.job(path)
	_, ss := e.session(key)
	if !j.V1.Owned || watched.Load() == 0 {
		t.Errorf("owned %v after %d watches of the peer's session", j.V1.Owned, watched.Load())
	}
	if ss.PartsResent != 0 || ss.BytesReceived != size {
		t.Errorf("storage received %d bytes for a %d-byte file (%d parts resent)", ss.BytesReceived, size, ss.PartsResent)
	}
}

// TestV1ParkedJobHoldsNoWorker: a job whose session another daemon is
// uploading is parked (its reason stored) and the only worker publishes
// another file meanwhile; when the peer completes the session, the parked
// job takes the outcome without sending a byte.
func TestV1ParkedJobHoldsNoWorker(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("peer.ply", 3)
	_, key, size, peerSends := peerSession(t, e.client, path)
	if err := peerSends(1, 1); err != nil {
		t.Fatal(err)
	}
	other := e.writeParts("other.ply", 2)
	e.enqueue(path, other)
	o := e.v1Options(1) // PeerWait an hour: the job never takes the session over
	var parked, otherDone atomic.Bool
	peerErr := make(chan error, 1)
	o.workerHook = func(point string, j state.Job) error {
		switch {
		case !strings.HasPrefix(point, "commit:"):
		case j.Path == path:
			parked.Store(j.Parked != "")
		case j.Stage == state.Done && parked.Load() && !otherDone.Swap(true):
			go func() { peerErr <- peerSends(2, 3) }()
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	if !otherDone.Load() {
		t.Fatal("the other file was not published while the peer's job was parked")
	}
	if err := <-peerErr; err != nil {
		t.Fatal(err)
	}
	e.checkV1Once(path, other)
	j := e.job(path)
	_, ss := e.session(key)
	if j.Stage != state.Done || j.V1.Owned || j.Parked != "" || ss.PartsResent != 0 || ss.BytesReceived != size {
		t.Errorf("peer's job %s owned %v parked %q; storage received %d of %d bytes", j.Stage, j.V1.Owned, j.Parked, ss.BytesReceived, size)
	}
}

// TestV1TwoDaemonsOneFolder: two pools with their own stores publish the
// files of one folder: each file once, the bytes sent barely more than the
// files' size.
func TestV1TwoDaemonsOneFolder(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	var paths []string
	var total int64
	for i := range 4 {
		p := e.writeParts(string(rune('a'+i))+".ply", 3+i)
		paths = append(paths, p)
		total += fileSize(t, p)
	}
	other, err := queue.Open(t.TempDir(), queue.Options{LockTimeout: time.Second, DedupeWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	for _, p := range paths {
		fi, _ := os.Stat(p)
		if _, err := other.EnqueueBatch(context.Background(), []queue.Candidate{{Path: p, Root: e.files, Size: fi.Size(), ModTime: fi.ModTime()}}); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(paths...)

	o1, o2 := e.v1Options(2), e.v1Options(2)
	o2.Store = other
	o1.Timing.PeerWait, o2.Timing.PeerWait = time.Minute, time.Minute
	final := func(s *queue.Store) bool {
		st, err := s.Stats()
		return err == nil && st.Stages[state.Done]+st.Stages[state.Failed] == len(paths)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, o := range []PoolOptions{o1, o2} {
		p, err := NewPool(o)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	e.waitFor("both daemons' jobs final", func() bool { return final(e.store) && final(other) })
	cancel()
	wg.Wait()

	e.checkV1Once(paths...)
	js, err := other.List(queue.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if mine := e.job(j.Path); j.Stage != state.Done || j.SplatID != mine.SplatID {
			t.Errorf("%s: the other daemon has %s splat %q, this one %q", j.Path, j.Stage, j.SplatID, mine.SplatID)
		}
	}
	st := e.sim.Stats()
	var received int64
	for _, ss := range st.Sessions {
		received += ss.BytesReceived
	}
	t.Logf("%d files, %d bytes; storage received %d bytes (%.2f×); %d sessions, %d create replays, %d complete replays",
		len(paths), total, received, float64(received)/float64(total), st.Creates, st.CreateReplays, st.CompleteReplays)
	if st.V1Splats != len(paths) || st.Creates != len(paths) {
		t.Errorf("%d splats from %d sessions for %d files", st.V1Splats, st.Creates, len(paths))
	}
	if float64(received) > 1.25*float64(total) {
		t.Errorf("storage received %d bytes for %d bytes of files: more than 1.25×", received, total)
	}
}

// TestV1CrashBeforeCreateAnswerTakesAPeersReceipt: a daemon that crashed
// between committing its create intent and the create's answer takes the
// session it then finds completed for its own (the answer it never saw may
// have made it), so it waits for no receipt. When a peer's receipt for the
// content is already there, the peer completed it: the splat is taken from
// the receipt, with no replayed complete (a fleet restarted after a kill -9
// replayed one per job that had been waiting in ready).
func TestV1CrashBeforeCreateAnswerTakesAPeersReceipt(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	path := e.writeParts("done.ply", 4)
	e.enqueue(path)
	if err := e.run(e.v1Options(1)); err != nil {
		t.Fatal(err)
	}
	first := e.job(path)
	e.stateDir = t.TempDir() // the second daemon
	e.store = nil
	e.reopen()
	e.enqueue(path)
	e.crashBeforeCreate()
	e.reopen()
	before := e.sim.Stats()
	o := e.v1Options(1)
	o.Peers = receiptFunc(func(j state.Job) (PeerOutcome, error) {
		if j.SHA256 != first.SHA256 {
			return PeerOutcome{}, ErrNoPeerReceipt
		}
		return PeerOutcome{SplatID: first.SplatID, ViewerURL: first.ViewerURL, CompletedAt: first.CompletedAt, Receipt: "r"}, nil
	})
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.job(path)
	if j.Stage != state.Done || j.SplatID != first.SplatID || !fleet.FromPeer(j) {
		t.Errorf("second daemon: %s splat %s from peer %v, want done with %s from the receipt", j.Stage, j.SplatID, fleet.FromPeer(j), first.SplatID)
	}
	if replays := e.sim.Stats().CompleteReplays - before.CompleteReplays; replays != 0 {
		t.Errorf("%d complete replays, want 0: the receipt named the splat", replays)
	}
}

// TestV1FileGoneToAPeer: in a fleet whose daemons delete what they
// published, a peer's job whose file is gone before it read it ends done
// with the outcome of the receipt left where the file was, runs no
// after-action of its own and makes no API call; with no receipt there it
// fails as gone, as before (a fleet on on_success: delete failed such jobs,
// and alerted on them).
func TestV1FileGoneToAPeer(t *testing.T) {
	t.Parallel()
	for _, receipt := range []bool{true, false} {
		e := newV1Env(t, apisim.Options{})
		path := e.writeParts("gone.ply", 2)
		e.enqueue(path)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		o := e.v1Options(1)
		var finishes atomic.Int32
		o.After = finishFunc(func(context.Context, state.Job) error { finishes.Add(1); return nil })
		o.Peers = receiptFunc(func(j state.Job) (PeerOutcome, error) {
			if !receipt {
				return PeerOutcome{}, fs.ErrNotExist
			}
			return PeerOutcome{SplatID: "peer-splat", ViewerURL: "https://v/peer-splat", Receipt: j.Path + ".splat.json"}, nil
		})
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j := e.job(path)
		st := e.sim.Stats()
		switch {
		case receipt && (j.Stage != state.Done || j.SplatID != "peer-splat" || !fleet.FromPeer(j)):
			t.Errorf("with the peer's receipt: %s splat %q from peer %v (%s)", j.Stage, j.SplatID, fleet.FromPeer(j), j.FailReason)
		case receipt && (finishes.Load() != 0 || st.Creates != 0):
			t.Errorf("with the peer's receipt: %d after-actions, %d creates; want none", finishes.Load(), st.Creates)
		case !receipt && (j.Stage != state.Failed || !strings.Contains(j.FailReason, "file is gone")):
			t.Errorf("without a receipt: %s (%s), want failed as gone", j.Stage, j.FailReason)
		}
	}
}

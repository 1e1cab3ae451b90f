package fleet

import (
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"time"

	"github.com/splatd/splatd/state"
)

// Share bounds: shareFloor is the least patience for a silent peer;
// shareCold the patience before this daemon has shareMinGaps gaps between
// its own publishes; shareSamples how many gaps it keeps.
const (
	shareFloor   = time.Minute
	shareCold    = 2 * time.Minute
	shareMinGaps = 4
	shareSamples = 32
	shareFactor  = 4
	// shareLooks is how many times per bound a waiting job reads its
	// receipt (a look is a commit; a waiter's receipt is no fleet's
	// critical path).
	shareLooks = 6
)

// waitOn is the peer a job waits on and since when.
type waitOn struct {
	peer string
	at   time.Time
}

// Finished records that job j became final: it waits on no peer, and a v1
// publish of this daemon's own is one more gap between publishes.
func (v *View) Finished(j state.Job) {
	v.forget(j.ID)
	if j.Stage == state.Done && j.DuplicateOf == 0 && j.Protocol == state.ProtocolV1 && !FromPeer(j) {
		v.published(v.o.Now())
	}
}

// published records one of this daemon's own publishes.
func (v *View) published(now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if gap := now.Sub(v.lastOwn); gap > 0 {
		v.gaps = append(v.gaps, gap)
		if len(v.gaps) > shareSamples {
			v.gaps = v.gaps[1:]
		}
	}
	v.lastOwn = now
}

// bound is how long a peer may go without a receipt before its share is
// taken: shareFactor × the 90th percentile of this daemon's own gaps
// between publishes, at least shareFloor; shareCold with too few.
func (v *View) bound() time.Duration {
	if len(v.gaps) < shareMinGaps {
		return shareCold
	}
	g := slices.Sorted(slices.Values(v.gaps))
	return max(shareFloor, shareFactor*g[min(len(g)-1, len(g)*9/10)])
}

// forget drops a job that left the wait.
func (v *View) forget(id uint64) {
	v.mu.Lock()
	delete(v.since, id)
	delete(v.taken, id)
	v.mu.Unlock()
}

// TakenOver reports (once) whether job id was taken from a lost peer.
func (v *View) TakenOver(id uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.taken[id]
	delete(v.taken, id)
	return t
}

// Rank is member m's rank for a job's file: a hash of the file's key
// (its path under its watch folder, and its size) and m; the lowest wins.
func Rank(j state.Job, m string) uint64 {
	key := j.Path
	if rel, err := filepath.Rel(j.Root, j.Path); err == nil && j.Root != "" {
		key = filepath.ToSlash(rel)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%s", key, j.Size, m)
	return h.Sum64()
}

// owner is the member whose share j's file is in, among members not taken
// for lost.
func (v *View) owner(j state.Job, members map[string]string) string {
	var owner string
	var best uint64
	for m, nonce := range members {
		if n, ok := v.lost[m]; ok && n == nonce {
			continue
		}
		if r := Rank(j, m); owner == "" || r < best {
			owner, best = m, r
		}
	}
	return owner
}

// Hashed parks a queued job, hashed as sum, whose file is in a live peer's
// share until that peer's receipt gives its outcome. parked is false when
// the job is this daemon's to publish: its own share, a lost peer's, or no
// fleet.
func (v *View) Hashed(j state.Job, sum string) (next state.Job, parked bool, err error) {
	f := v.o.Members
	if f == nil || v.o.Receipts == nil || !v.o.V1 || j.Generation != 0 || j.Root == "" {
		return j, false, nil
	}
	self, now := f.Self(), v.o.Now()
	members, _ := f.Members(j.Root)
	members[self] = ""
	v.mu.Lock()
	defer v.mu.Unlock()
	for {
		peer := v.owner(j, members)
		w, waited := v.since[j.ID]
		if peer == self {
			// A file first in a peer's share is that peer's no longer:
			// its session, if any, is taken over at once.
			delete(v.since, j.ID)
			v.taken[j.ID] = waited
			return j, false, nil
		}
		checked := j
		checked.SHA256 = sum
		out, rerr := v.o.Receipts.Receipt(checked)
		if rerr == nil {
			delete(v.since, j.ID)
			v.progress[peer] = now
			next, err := peerDone(checked, now, out, "published by another daemon of the fleet (its share): taken from its receipt "+out.Receipt)
			return next, err == nil, err
		}
		if !errors.Is(rerr, ErrNoReceipt) {
			return j, false, nil
		}
		b := v.bound()
		if !waited || w.peer != peer {
			// A share that moved: its new owner may be a bound late to see why.
			w = waitOn{peer: peer, at: now}
			if waited {
				w.at = now.Add(b)
			}
			v.since[j.ID] = w
		}
		from := w.at
		if at := v.progress[peer]; at.After(from) {
			from = at
		}
		left := from.Add(b).Sub(now)
		if left > 0 {
			j.SHA256 = sum
			j.NextAttempt = now.Add(min(max(v.o.PollInterval, b/shareLooks), left))
			j.LastError, j.LastStatus = "", 0
			j.Parked = fmt.Sprintf("in fleet peer %s's share: waiting for its receipt (taken over if that peer sends none for %s more)", peer, left.Round(time.Second))
			return j, true, nil
		}
		v.lost[peer] = members[peer]
		v.o.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("peer", peer).Float64("bound_s", b.Seconds()).
			Msg("fleet peer sent no receipt within the bound: its share is taken over")
	}
}

// Waiting counts the queued jobs parked on a fleet peer's share.
func (v *View) Waiting() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.since)
}

// Alone reports whether the fleet knows no other daemon live on root
// (false without members: then any daemon may share the folder).
func (v *View) Alone(root string) bool {
	f := v.o.Members
	if f == nil {
		return false
	}
	members, known := f.Members(root)
	if !known {
		return false
	}
	for m := range members {
		if m != f.Self() {
			return false
		}
	}
	return true
}

// Starting parks a queued job, before it is read, while the fleet's
// members cannot be known yet (this daemon just started).
func (v *View) Starting(j state.Job) (state.Job, bool) {
	if v.o.Members == nil || v.o.Receipts == nil || !v.o.V1 || j.Root == "" {
		return j, false
	}
	if _, known := v.o.Members.Members(j.Root); known {
		return j, false
	}
	j.NextAttempt = v.o.Now().Add(max(v.o.PollInterval, time.Second))
	j.LastError, j.LastStatus = "", 0
	j.Parked = "waiting for the fleet's members to announce themselves (this daemon just started)"
	return j, true
}

package uploader

import (
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
)

// Fleet names the daemons of a fleet on a job's watch folder, so that
// the backlog is cut into shares (docs/architecture.md, "Shares of a shared folder").
type Fleet interface {
	// Self is this daemon's member key.
	Self() string
	// Members are the live members announced on root (this daemon among
	// them), each with the nonce of its current start; known is false
	// while they cannot be known yet (just started).
	Members(root string) (members map[string]string, known bool)
}

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

// shares is a pool's view of its fleet's progress, in memory only.
type shares struct {
	mu       sync.Mutex
	lastOwn  time.Time            // this daemon's latest own publish, or its start
	gaps     []time.Duration      // the latest gaps between its own publishes
	progress map[string]time.Time // each peer's latest receipt seen
	lost     map[string]string    // peers taken for lost, by the nonce they had
	since    map[uint64]waitOn    // jobs waiting on a peer: which, since when
	taken    map[uint64]bool      // jobs taken over from a lost peer
}

func newShares(now time.Time) *shares {
	return &shares{lastOwn: now, progress: map[string]time.Time{}, lost: map[string]string{},
		since: map[uint64]waitOn{}, taken: map[uint64]bool{}}
}

// published records one of this daemon's own publishes.
func (s *shares) published(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gap := now.Sub(s.lastOwn); gap > 0 {
		s.gaps = append(s.gaps, gap)
		if len(s.gaps) > shareSamples {
			s.gaps = s.gaps[1:]
		}
	}
	s.lastOwn = now
}

// bound is how long a peer may go without a receipt before its share is
// taken: shareFactor × the 90th percentile of this daemon's own gaps
// between publishes, at least shareFloor; shareCold with too few.
func (s *shares) bound() time.Duration {
	if len(s.gaps) < shareMinGaps {
		return shareCold
	}
	g := slices.Sorted(slices.Values(s.gaps))
	return max(shareFloor, shareFactor*g[min(len(g)-1, len(g)*9/10)])
}

// forget drops a job that left the wait.
func (s *shares) forget(id uint64) {
	s.mu.Lock()
	delete(s.since, id)
	delete(s.taken, id)
	s.mu.Unlock()
}

// takenOver reports (once) whether job id was taken from a lost peer.
func (s *shares) takenOver(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.taken[id]
	delete(s.taken, id)
	return t
}

// shareRank is member m's rank for a job's file: a hash of the file's key
// (its path under its watch folder, and its size) and m; the lowest wins.
func shareRank(j state.Job, m string) uint64 {
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
func (s *shares) owner(j state.Job, members map[string]string) string {
	var owner string
	var best uint64
	for m, nonce := range members {
		if n, ok := s.lost[m]; ok && n == nonce {
			continue
		}
		if r := shareRank(j, m); owner == "" || r < best {
			owner, best = m, r
		}
	}
	return owner
}

// shareWait parks a queued job, hashed as sum, whose file is in a live
// peer's share until that peer's receipt gives its outcome. parked is
// false when the job is this daemon's to publish: its own share, a lost
// peer's, or no fleet.
func (p *Pool) shareWait(j state.Job, sum string) (next state.Job, parked bool, err error) {
	f := p.fleet
	if f == nil || p.o.Peers == nil || p.o.Protocol != ProtocolV1 || j.Generation != 0 || j.Root == "" {
		return j, false, nil
	}
	s, self, now := p.shares, f.Self(), p.o.Now()
	members, _ := f.Members(j.Root)
	members[self] = ""
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		peer := s.owner(j, members)
		w, waited := s.since[j.ID]
		if peer == self {
			// A file first in a peer's share is that peer's no longer:
			// its session, if any, is taken over at once.
			delete(s.since, j.ID)
			s.taken[j.ID] = waited
			return j, false, nil
		}
		checked := j
		checked.SHA256 = sum
		out, rerr := p.o.Peers.Receipt(checked)
		if rerr == nil {
			delete(s.since, j.ID)
			s.progress[peer] = now
			next, err := peerDone(checked, now, out, "published by another daemon of the fleet (its share): taken from its receipt "+out.Receipt)
			return next, err == nil, err
		}
		if !errors.Is(rerr, ErrNoPeerReceipt) {
			return j, false, nil
		}
		b := s.bound()
		if !waited || w.peer != peer {
			// A share that moved: its new owner may be a bound late to see why.
			w = waitOn{peer: peer, at: now}
			if waited {
				w.at = now.Add(b)
			}
			s.since[j.ID] = w
		}
		from := w.at
		if at := s.progress[peer]; at.After(from) {
			from = at
		}
		left := from.Add(b).Sub(now)
		if left > 0 {
			j.SHA256 = sum
			j.NextAttempt = now.Add(min(max(p.o.Timing.Poll.Interval, b/shareLooks), left))
			j.LastError, j.LastStatus = "", 0
			j.Parked = fmt.Sprintf("in fleet peer %s's share: waiting for its receipt (taken over if that peer sends none for %s more)", peer, left.Round(time.Second))
			return j, true, nil
		}
		s.lost[peer] = members[peer]
		p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("peer", peer).Float64("bound_s", b.Seconds()).
			Msg("fleet peer sent no receipt within the bound: its share is taken over")
	}
}

// PeerWaiting counts the queued jobs parked on a fleet peer's share.
func (p *Pool) PeerWaiting() int {
	p.shares.mu.Lock()
	defer p.shares.mu.Unlock()
	return len(p.shares.since)
}

// alone reports whether the fleet knows no other daemon live on root
// (false without a fleet: then any daemon may share the folder).
func (p *Pool) alone(root string) bool {
	f := p.fleet
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

// shareStarting parks a queued job, before it is read, while the fleet's
// members cannot be known yet (this daemon just started).
func (p *Pool) shareStarting(j state.Job) (state.Job, bool) {
	if p.fleet == nil || p.o.Peers == nil || p.o.Protocol != ProtocolV1 || j.Root == "" {
		return j, false
	}
	if _, known := p.fleet.Members(j.Root); known {
		return j, false
	}
	j.NextAttempt = p.o.Now().Add(max(p.o.Timing.Poll.Interval, time.Second))
	j.LastError, j.LastStatus = "", 0
	j.Parked = "waiting for the fleet's members to announce themselves (this daemon just started)"
	return j, true
}

// peerDone ends queued job j as done with the outcome a peer's receipt
// gives, running no after-action of its own (the peer ran it).
func peerDone(j state.Job, now time.Time, out PeerOutcome, message string) (state.Job, error) {
	if err := j.Move(state.Done, now); err != nil {
		return j, err
	}
	j.SplatID, j.SplatHash, j.ViewerURL = out.SplatID, out.SplatHash, out.ViewerURL
	j.PublishedAt, j.CompletedAt = out.PublishedAt, out.CompletedAt
	j.TaskStatus, j.TaskMessage = "done", message
	j.Protocol, j.V1 = state.ProtocolV1, &state.Session{FromPeer: true, EditURL: out.EditURL}
	j.LastError, j.LastStatus = "", 0
	return j, nil
}

package apisim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Checkpoint is one seeded checkpoint, as the listing returns it.
type Checkpoint struct {
	ID          string    `json:"id"`
	User        User      `json:"user"`
	CreatedAt   time.Time `json:"-"`
	Description string    `json:"description"`
}

// User is a checkpoint's creator.
type User struct {
	ID       int64  `json:"id"`
	FullName string `json:"fullName"`
	Username string `json:"username"`
}

// seedUsers take turns as checkpoint authors.
var seedUsers = []User{
	{ID: 1001, FullName: "Ada Lovelace", Username: "ada"},
	{ID: 1002, FullName: "Grace Hopper", Username: "grace"},
	{ID: 1003, FullName: "Édouard Lucas", Username: "elucas"},
}

// seedBranch creates a branch with n checkpoints one minute apart, the
// newest a minute before now. Callers hold s.mu or run before serving.
func (s *Server) seedBranch(name string, n int) {
	base := s.now().Truncate(time.Second)
	cps := make([]Checkpoint, 0, n)
	for i := range n {
		cps = append(cps, s.newCheckpoint(base.Add(-time.Duration(n-i)*time.Minute), i+1))
	}
	s.branches[name] = cps
}

// newCheckpoint makes a checkpoint with a random 24-hex id (not ordered,
// so a client cannot page by comparing ids). Callers hold s.mu.
func (s *Server) newCheckpoint(at time.Time, seq int) Checkpoint {
	return Checkpoint{
		ID:          fmt.Sprintf("%08x%016x", s.rng.Uint32(), s.rng.Uint64()),
		User:        seedUsers[seq%len(seedUsers)],
		CreatedAt:   at,
		Description: fmt.Sprintf("Checkpoint %d", seq),
	}
}

// AddCheckpoints appends n new checkpoints (newer than all others) to
// branch, creating the branch if needed, and returns them newest first. A
// test can add some while a client is paging.
func (s *Server) AddCheckpoints(branch string, n int) []Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	cps := s.branches[branch]
	at := s.now()
	if len(cps) > 0 && !at.After(cps[len(cps)-1].CreatedAt) {
		at = cps[len(cps)-1].CreatedAt.Add(time.Millisecond)
	}
	out := make([]Checkpoint, n)
	for i := range n {
		cp := s.newCheckpoint(at.Add(time.Duration(i)*time.Millisecond), len(cps)+1)
		cps = append(cps, cp)
		out[n-1-i] = cp
	}
	s.branches[branch] = cps
	return out
}

// Checkpoints returns a branch's checkpoints newest first, for comparing
// with what a client listed.
func (s *Server) Checkpoints(branch string) ([]Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cps, ok := s.branches[branch]
	out := make([]Checkpoint, 0, len(cps))
	for i := len(cps) - 1; i >= 0; i-- {
		out = append(out, cps[i])
	}
	return out, ok
}

// checkpointJSON adds the ISO date to a Checkpoint.
type checkpointJSON struct {
	Checkpoint
	CreatedAt string `json:"createdAt"`
}

func (s *Server) handleCheckpoints(w http.ResponseWriter, r *http.Request, branch string) int {
	q := r.URL.Query()
	limit := DefaultCheckpointLimit
	if v := q.Get("limit"); q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 50 {
			return jsonError(w, http.StatusBadRequest, "limit must be an integer from 1 to 50")
		}
		limit = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cps, ok := s.branches[branch]
	if !ok {
		return jsonError(w, http.StatusNotFound, "branch not found")
	}
	// end is one past the newest checkpoint to return (cps is oldest first).
	end := len(cps)
	if skip := q.Get("skip"); skip != "" {
		end = -1
		for i, cp := range cps {
			if cp.ID == skip {
				end = i
				break
			}
		}
		if end < 0 {
			return jsonError(w, http.StatusBadRequest, "invalid skip: no such checkpoint")
		}
	}
	result := make([]checkpointJSON, 0, limit)
	i := end - 1
	for ; i >= 0 && len(result) < limit; i-- {
		result = append(result, checkpointJSON{Checkpoint: cps[i], CreatedAt: isoTime(cps[i].CreatedAt)})
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"result":     result,
		"pagination": map[string]bool{"hasMore": i >= 0},
	})
}

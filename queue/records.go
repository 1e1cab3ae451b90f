package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// hashEntry is the value of the sha256 index. Job is the job that owns the
// content; the splat fields are filled when that job is pruned (tombstone).
type hashEntry struct {
	V       int       `json:"v"`
	Job     uint64    `json:"job"`
	Pruned  bool      `json:"pruned,omitempty"`
	SplatID string    `json:"splat_id,omitempty"`
	Hash    string    `json:"splat_hash,omitempty"`
	URL     string    `json:"url,omitempty"`
	At      time.Time `json:"at,omitzero"`
	// Gen is the content's generation (state.Job.Generation): Forget keeps
	// the entry and raises it for the content's next job.
	Gen int `json:"gen,omitempty"`
}

// pathEntry is the value of the path index: the latest job for a path and
// the size and mtime it was last seen (or hashed) with.
type pathEntry struct {
	V     int    `json:"v"`
	Job   uint64 `json:"job"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"` // Unix ns: no monotonic clock or zone to compare
}

// decodePath decodes a path entry as json.Unmarshal does, reading the
// form json.Marshal writes without it (a scan decodes one per file).
func decodePath(raw []byte, pe *pathEntry) error {
	var v [4]int64
	b := raw
	for i, key := range [...]string{`{"v":`, `,"job":`, `,"size":`, `,"mtime":`} {
		rest, ok := bytes.CutPrefix(b, []byte(key))
		n := 0
		if ok && i >= 2 && len(rest) > 0 && rest[0] == '-' {
			n++
		}
		d := n
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		var err error
		if ok && n > d && (rest[d] != '0' || n == d+1) {
			v[i], err = strconv.ParseInt(string(rest[:n]), 10, 64)
		}
		if !ok || n == d || (rest[d] == '0' && n > d+1) || err != nil {
			return json.Unmarshal(raw, pe)
		}
		b = rest[n:]
	}
	if string(b) != "}" {
		return json.Unmarshal(raw, pe)
	}
	*pe = pathEntry{V: int(v[0]), Job: uint64(v[1]), Size: v[2], MTime: v[3]}
	return nil
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// timeKey orders by time then id. Times before 1970 (the zero time) sort
// first, as "due now".
func timeKey(t time.Time, id uint64) []byte {
	var b [16]byte
	var ns uint64
	if n := t.UnixNano(); !t.IsZero() && n > 0 {
		ns = uint64(n)
	}
	binary.BigEndian.PutUint64(b[:8], ns)
	binary.BigEndian.PutUint64(b[8:], id)
	return b[:]
}

func splitTimeKey(k []byte) (time.Time, uint64) {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))), binary.BigEndian.Uint64(k[8:])
}

// has reports whether b holds key k. (Get cannot tell: it may return nil
// for the empty values the index buckets hold.)
func has(b *bolt.Bucket, k []byte) bool {
	got, _ := b.Cursor().Seek(k)
	return bytes.Equal(got, k)
}

// count reads a counter from the meta bucket; a missing one is zero.
func count(tx *bolt.Tx, key []byte) int {
	v := tx.Bucket(bucketMeta).Get(key)
	if len(v) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(v))
}

// addCount moves a counter in the meta bucket, in the caller's transaction,
// so that it commits (or not) with the change it counts. The callers move a
// counter only when the key it counts appears or goes, so it cannot drift;
// were it ever to, a wrong statistic must not stop the jobs it counts, so
// it stops at zero instead of failing the commit.
func addCount(tx *bolt.Tx, key []byte, delta int64) error {
	n := max(int64(count(tx, key))+delta, 0)
	return tx.Bucket(bucketMeta).Put(key, u64(uint64(n)))
}

func getJob(tx *bolt.Tx, id uint64) (state.Job, error) {
	v := tx.Bucket(bucketJobs).Get(u64(id))
	if v == nil {
		return state.Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	// Unmarshal copies out of the mmap: the job stays valid after the txn.
	return decodeJob(id, v)
}

func putJob(tx *bolt.Tx, j state.Job) error {
	b, err := j.Marshal()
	if err != nil {
		return err
	}
	return tx.Bucket(bucketJobs).Put(u64(j.ID), b)
}

func getJSON(b *bolt.Bucket, key []byte, v any) (bool, error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode %s/%s: %w", "index", key, err)
	}
	return true, nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestSeeker holds seeker.get to Bucket.Get over keys asked in order, out
// of order, absent, between and past the stored ones.
func TestSeeker(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "s.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored [][]byte
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := 0; i < 3000; i += 3 { // every third key: the others are absent
			k := fmt.Appendf(nil, "/w/d%02d/f%04d", i/100, i)
			stored = append(stored, k)
			if err := b.Put(k, fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var asked [][]byte
	for i := -5; i < 3010; i++ {
		asked = append(asked, fmt.Appendf(nil, "/w/d%02d/f%04d", max(i, 0)/100, i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shuffled := slices.Clone(asked)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	sparse := slices.DeleteFunc(slices.Clone(asked), func([]byte) bool { return rng.IntN(4) > 0 })
	orders := map[string][][]byte{
		"ascending":       asked,
		"shuffled":        shuffled,
		"ascending, gaps": sparse,
		"stored, twice":   append(slices.Clone(stored), stored...),
		"past the end":    {stored[len(stored)-1], []byte("/x"), []byte("/y"), stored[0]},
	}
	found := 0
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for name, keys := range orders {
			s := seeker{c: b.Cursor()}
			for _, k := range keys {
				want, got := b.Get(k), s.get(k)
				if string(got) != string(want) || (got == nil) != (want == nil) {
					t.Errorf("%s: get(%s) = %q, Get %q", name, k, got, want)
				}
				if want != nil {
					found++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 2000 {
		t.Fatalf("only %d of the keys asked were stored: the test asks too few", found)
	}
}

// TestPathIndexFill: files enqueued and adopted folder by folder, in name
// order, fill the paths index's pages to about pathsFill, not half, and so
// does Recover's rebuild; KnownBatch answers as Known whatever the order it
// is asked in.
func TestPathIndexFill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var all []Candidate
	for d := range 40 {
		var batch []Candidate
		var adopt []Adoption
		for f := range 100 {
			c := cand(fmt.Sprintf("/inbox/shoot-%04d/take-%03d.ply", d, f), int64(1000+f), 100)
			all = append(all, c)
			if d%2 == 0 {
				batch = append(batch, c)
			} else {
				adopt = append(adopt, Adoption{Path: c.Path, Root: c.Root, Size: c.Size, ModTime: c.ModTime, SHA256: fmt.Sprintf("%064x", d*100+f)})
			}
		}
		if _, err := s.EnqueueBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AdoptBatch(ctx, adopt); err != nil {
			t.Fatal(err)
		}
	}
	checkFill := func(when string) {
		t.Helper()
		var st bolt.BucketStats
		_ = s.db.DB.View(func(tx *bolt.Tx) error { st = tx.Bucket(bucketPaths).Stats(); return nil })
		if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); st.KeyN != len(all) || fill < 0.8 {
			t.Errorf("paths index %s: %d keys in %d leaf pages, %.0f%% full; want %d keys, at least 80%% full", when, st.KeyN, st.LeafPageN, 100*fill, len(all))
		}
	}
	checkFill("after enqueue and adopt")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(dir, time.Second, time.Now()); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	checkFill("after Recover")

	asked := append(slices.Clone(all), cand("/inbox/shoot-0003/take-050.ply", 7, 100), cand("/inbox/zz.ply", 1, 1), cand("/a.ply", 1, 1))
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(asked)-200, func(i, j int) { asked[200+i], asked[200+j] = asked[200+j], asked[200+i] })
	known := s.KnownBatch(asked)
	for i, c := range asked {
		if want := s.Known(c.Path, c.Size, c.ModTime); known[i] != want {
			t.Errorf("KnownBatch(%s, %d) = %v, Known %v", c.Path, c.Size, known[i], want)
		}
	}
}

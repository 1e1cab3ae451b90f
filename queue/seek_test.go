package queue

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

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

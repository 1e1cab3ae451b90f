package apisim

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestStatsStampsFirstByteAsItArrives checks that FirstBodyByte is taken
// when storage reads a part's first byte, not when the request ends, and
// LastPartStored when the part is stored.
func TestStatsStampsFirstByteAsItArrives(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := newSim(t, Options{Now: clock.Now, PartSize: 5 << 20})
	c := newClient(t, s)
	data := bytes.Repeat([]byte("splat"), 1<<20)
	sess := c.create("stamps", createBody(data), 201)
	url := c.signParts(sess.ID, 1)[1]
	part := partOf(data, sess.PartSize, 1)

	t1 := clock.Now()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPut, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(part))
	done := make(chan int, 1)
	go func() {
		resp, err := c.hc.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	if _, err := pw.Write(part[:64<<10]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.Stats().FirstBodyByte.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("FirstBodyByte still zero with the part's first bytes sent")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Add(10 * time.Second)
	if !s.Stats().LastPartStored.IsZero() {
		t.Fatal("LastPartStored set before any part was stored")
	}
	if _, err := pw.Write(part[64<<10:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("part PUT answered %d", code)
	}
	st := s.Stats()
	if !st.FirstBodyByte.Equal(t1) || !st.LastPartStored.Equal(t1.Add(10*time.Second)) {
		t.Errorf("FirstBodyByte %v LastPartStored %v, want %v and 10 s later", st.FirstBodyByte, st.LastPartStored, t1)
	}
}

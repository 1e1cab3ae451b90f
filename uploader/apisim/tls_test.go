package apisim

import (
	"bytes"
	"os"
	"testing"
)

// TestKeepCA: a simulator started again on the same Dir with KeepCA
// presents a certificate of the same CA, so a client that trusts the
// first start's CA file trusts the second; without KeepCA the CA is new.
func TestKeepCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(keep bool) (*Server, []byte) {
		s, err := New(Options{Dir: dir, KeepCA: keep})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		pem, err := os.ReadFile(s.CAFile())
		if err != nil {
			t.Fatal(err)
		}
		return s, pem
	}
	first, ca1 := start(true)
	trusting := first.Client()
	first.Close()
	second, ca2 := start(true)
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("a restart with KeepCA made a new CA")
	}
	resp, err := trusting.Get(second.URL() + "/")
	if err != nil {
		t.Fatalf("a client of the first start's CA, to the second: %v", err)
	}
	resp.Body.Close()
	if _, ca3 := start(false); bytes.Equal(ca1, ca3) {
		t.Error("without KeepCA the CA stayed")
	}
}

// TestKeepCAAfterANewOne: a KeepCA start after a start without it (which
// wrote a new ca.pem beside the kept key) starts, with a CA of its own.
func TestKeepCAAfterANewOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, keep := range []bool{true, false, true} {
		s, err := New(Options{Dir: dir, KeepCA: keep})
		if err != nil {
			t.Fatalf("KeepCA %v: %v", keep, err)
		}
		s.Close()
	}
}

package sog

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEncodeWithoutWriteExecute encodes in a child process that may not
// make memory executable (PR_SET_MDWE, what systemd's
// MemoryDenyWriteExecute asks the kernel for): the encoder needs no
// executable memory and writes the same bytes there.
func TestEncodeWithoutWriteExecute(t *testing.T) {
	s, _ := scene(t, 300, 3, 9)
	want := encode(t, s)
	if os.Getenv("SOG_TEST_MDWE_CHILD") == "1" {
		t.Skip("run by the parent")
	}
	out := t.TempDir() + "/child.sog"
	cmd := exec.Command(os.Args[0], "-test.run=^TestMDWEChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SOG_TEST_MDWE_CHILD=1", "SOG_TEST_MDWE_OUT="+out)
	b, err := cmd.CombinedOutput()
	if bytes.Contains(b, []byte("MDWE unsupported")) {
		t.Skip("this kernel has no PR_SET_MDWE")
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the SOG made under MDWE differs (%d vs %d bytes)", len(got), len(want))
	}
}

func TestMDWEChild(t *testing.T) {
	if os.Getenv("SOG_TEST_MDWE_CHILD") != "1" {
		t.Skip("a helper of TestEncodeWithoutWriteExecute")
	}
	if err := unix.Prctl(unix.PR_SET_MDWE, unix.PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0); err != nil {
		t.Skip("MDWE unsupported:", err)
	}
	s, _ := scene(t, 300, 3, 9)
	var out bytes.Buffer
	if err := Encode(context.Background(), &out, s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("SOG_TEST_MDWE_OUT"), out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

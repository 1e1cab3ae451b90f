package state

import (
	"bytes"
	"testing"
)

// TestJobNameBytes: a job's file name survives its JSON record byte for
// byte; one that is not UTF-8 (or that Shown escapes) is stored as its
// bytes beside its escaped form, and an ordinary name as text alone.
func TestJobNameBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, root string
		wantBytes  bool
	}{
		{"/in/scan é.ply", "/in", false},
		{"/in/\xff\xfe.ply", "/in", true},
		{"/in/caf\xe9.ply", "/in", true},
		{"/in/caf\ufffd.ply", "/in", false},
		{"/in/\u202egnp.ply", "/in", true},
		{"/in\xff/a.ply", "/in\xff", true},
	} {
		b, err := Job{ID: 1, File: File{Path: tc.path, Root: tc.root}, Stage: Queued}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte(`"path_bytes"`)); got != tc.wantBytes {
			t.Errorf("%q: path_bytes stored %v, want %v: %s", tc.path, got, tc.wantBytes, b)
		}
		if !bytes.Contains(b, []byte(`"path":"`+jsonText(Shown(tc.path))+`"`)) {
			t.Errorf("%q: the record's path is not its Shown form: %s", tc.path, b)
		}
		j, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if j.Path != tc.path || j.Root != tc.root {
			t.Errorf("%q in %q came back as %q in %q", tc.path, tc.root, j.Path, j.Root)
		}
	}
}

// jsonText is s as encoding/json writes a string's content (backslashes
// doubled; the test names hold no quotes or HTML).
func jsonText(s string) string { return string(bytes.ReplaceAll([]byte(s), []byte(`\`), []byte(`\\`))) }

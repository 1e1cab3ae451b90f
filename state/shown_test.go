package state

import "testing"

// TestShown: what a folder writer puts in a file name reaches a terminal
// as escapes, never as a newline, a cursor move or a colour; a name with
// spaces and accents is left as it is; a bidi control cannot reverse the
// line; a real U+FFFD and a byte that is not UTF-8 read differently.
func TestShown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/in/scan 1 é.ply":             "/in/scan 1 é.ply",
		"/in/nl\nname\x01\x1b[31m.ply": `/in/nl\nname\x01\x1b[31m.ply`,
		"/in/c1-\u009b2J.ply":          `/in/c1-\u009b2J.ply`,
		"/in/bad-\xff.ply":             `/in/bad-\xff.ply`,
		"tab\there":                    `tab\there`,
		"/in/\u202egnp.exe":            `/in/\u202egnp.exe`,
		"/in/iso\u2066x\u2069.ply":     `/in/iso\u2066x\u2069.ply`,
		"/in/caf\ufffd.ply":            "/in/caf\ufffd.ply",
		"/in/caf\xe9.ply":              `/in/caf\xe9.ply`,
	} {
		if got := Shown(in); got != want {
			t.Errorf("Shown(%q) = %q, want %q", in, got, want)
		}
	}
}

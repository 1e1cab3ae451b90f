package apisim

import "testing"

// TestMatchesSourceFormat: v1 processing fails an object whose bytes are
// not its sourceFormat's.
func TestMatchesSourceFormat(t *testing.T) {
	t.Parallel()
	ply, zip, gz, ngsp := []byte("ply\nformat"), []byte("PK\x03\x04rest"), []byte("\x1f\x8b\x08\x00"), []byte("NGSP\x04\x00")
	for _, tt := range []struct {
		format string
		head   []byte
		want   bool
	}{
		{"ply", ply, true}, {"ply", zip, false}, {"ply", ngsp, false},
		{"sog", zip, true}, {"sog", ply, false}, {"sog", gz, false},
		{"spz", gz, true}, {"spz", ngsp, true}, {"spz", ply, false}, {"spz", zip, false},
		{"lcc", ply, true},
	} {
		if got := matchesSourceFormat(tt.format, tt.head); got != tt.want {
			t.Errorf("matchesSourceFormat(%q, %q) = %v, want %v", tt.format, tt.head, got, tt.want)
		}
	}
}

package metrics

import (
	"os"
	"path/filepath"
	"testing"
)

// TestActionKeyReplacesAnEmptyFile: a key file a power cut left empty is
// replaced by a new key, not a start that fails; a good key is kept.
func TestActionKeyReplacesAnEmptyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ActionKeyName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ActionKey(path)
	if err != nil || len(key) < 16 {
		t.Fatalf("ActionKey of an empty file = %q, %v", key, err)
	}
	again, err := ActionKey(path)
	if err != nil || again != key {
		t.Errorf("the key read back is %q (%v), want %q", again, err, key)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file %v, %v; want mode 0600", fi, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

package config

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeReloadNamesEveryKey: the README's reload section names every
// config key, as applied by a reload or as needing a restart, on the side
// Reloadable puts it: a key added to Config without a word there fails.
func TestReadmeReloadNamesEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "**Reload.**")
	end := strings.Index(text, "**Bandwidth.**")
	if start < 0 || end < start {
		t.Fatal("README.md has no **Reload.** section before **Bandwidth.**")
	}
	section := text[start:end]
	applied, restart, ok := strings.Cut(section, "**need a restart**")
	if !ok {
		t.Fatal("the README's reload section does not say which keys **need a restart**")
	}
	named := func(part, key string) bool {
		if strings.Contains(part, "`"+key+"`") {
			return true
		}
		section, _, _ := strings.Cut(key, ".")
		return strings.Contains(part, "`"+section+".*`")
	}
	for key := range configLeaves(&Config{}) {
		if key == "api.token" {
			continue // refused in any config: not a key to reload
		}
		side, where := restart, "need a restart"
		if Reloadable(key) {
			side, where = applied, "apply at once"
		}
		if !named(side, key) {
			t.Errorf("README: the reload section does not name %s among the keys that %s", key, where)
		}
	}
}

package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeWalkMatchesSim: the README's walk from clone to the status page
// opens the address `splatd sim` writes into its config, and its commands
// use the paths sim writes.
func TestReadmeWalkMatchesSim(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, walk, ok := strings.Cut(string(b), "## From clone to the status page")
	if !ok {
		t.Fatal("README.md has no section \"From clone to the status page\"")
	}
	walk, _, _ = strings.Cut(walk, "\n## ")
	for _, want := range []string{
		"make demo", "bin/splatd sim -dir /tmp/splatd-sim", "bin/splatd run -config /tmp/splatd-sim/config.yaml",
		"/tmp/splatd-sim/inbox/", statusPageURL(simMetricsListen), "metrics.listen: " + simMetricsListen,
	} {
		if !strings.Contains(walk, want) {
			t.Errorf("the README's walk lacks %q", want)
		}
	}
}

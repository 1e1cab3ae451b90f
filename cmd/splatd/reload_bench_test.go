package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/splatd/splatd/cmd/internal/config"
)

// BenchmarkReload measures one reload of a daemon that has been opened (not
// run): read and validate the file, diff it against the running config and
// apply watch, publish, after, log level and bandwidth. Each iteration
// alternates between two files that differ in all of them.
//
//	go test -run '^$' -bench Reload ./cmd/splatd/
func BenchmarkReload(b *testing.B) {
	dir := b.TempDir()
	var paths [2]string
	for i := range paths {
		inbox := filepath.Join(dir, fmt.Sprintf("inbox%d", i))
		if err := os.MkdirAll(inbox, 0o755); err != nil {
			b.Fatal(err)
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("config%d.yaml", i))
		cfg := fmt.Sprintf("watch:\n  - path: %s\nstate_dir: %s\nmetrics: {listen: \"\"}\nlog: {level: %s}\n"+
			"upload: {bandwidth: %dMiB/s}\npublish: {title: \"t%d-{{.Stem}}\"}\nafter: {receipt: %v}\n",
			inbox, filepath.Join(dir, "state"), []string{"info", "debug"}[i], 10+i, i, i == 0)
		if err := os.WriteFile(paths[i], []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Load(paths[0], true)
	if err != nil {
		b.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SPLATD_TOKEN" {
			return "bench-token"
		}
		return ""
	}
	log, out := newLogger(cfg.Log, io.Discard, false)
	d, err := openDaemon(cfg, getenv, log)
	if err != nil {
		b.Fatal(err)
	}
	d.logOut = out
	defer d.closeAll()
	n := 0
	for b.Loop() {
		n++
		d.cfgPath = paths[n%2]
		if res := d.reload(); len(res.Errors) > 0 || len(res.Applied) != 5 {
			b.Fatalf("reload: %+v", res)
		}
	}
}

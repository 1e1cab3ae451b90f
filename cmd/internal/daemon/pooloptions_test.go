package daemon

import (
	"testing"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/uploader"
)

// TestPoolOptionsOfDefaults: the pool options of an empty config, which
// `splatd run` and `splatd publish` both start from, are the pool's one
// table (uploader.Defaults).
func TestPoolOptionsOfDefaults(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	got, def := PoolOptions(&cfg, nil), uploader.Defaults()
	if got.Workers != def.Workers || got.ParallelParts != def.ParallelParts || got.Settle != def.Settle ||
		got.Poll != def.Poll || got.IncompleteTimeout != def.IncompleteTimeout || got.MaxServerWait != def.MaxServerWait {
		t.Errorf("PoolOptions(Default()) = workers %d, parts %d, settle %v, poll %+v, incomplete %v, max wait %v; want the table's %d, %d, %v, %+v, %v, %v",
			got.Workers, got.ParallelParts, got.Settle, got.Poll, got.IncompleteTimeout, got.MaxServerWait,
			def.Workers, def.ParallelParts, def.Settle, def.Poll, def.IncompleteTimeout, def.MaxServerWait)
	}
}

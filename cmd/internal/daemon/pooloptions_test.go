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
	o, d := PoolOptions(&cfg, nil), uploader.Defaults()
	got, def := o.Timing, d.Timing
	if o.Workers != d.Workers || o.ParallelParts != d.ParallelParts || got.Settle != def.Settle ||
		got.Poll != def.Poll || got.IncompleteTimeout != def.IncompleteTimeout || got.MaxServerWait != def.MaxServerWait {
		t.Errorf("PoolOptions(Default()) = workers %d, parts %d, settle %v, poll %+v, incomplete %v, max wait %v; want the table's %d, %d, %v, %+v, %v, %v",
			o.Workers, o.ParallelParts, got.Settle, got.Poll, got.IncompleteTimeout, got.MaxServerWait,
			d.Workers, d.ParallelParts, def.Settle, def.Poll, def.IncompleteTimeout, def.MaxServerWait)
	}
}

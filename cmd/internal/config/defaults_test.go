package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/splatd/splatd/uploader"
)

// TestExampleStatesPoolDefaults: every key of config.example.yaml that the
// pool also has states the pool's one table (uploader.Defaults), read from
// the file's own text, and Default agrees; the daemon and `splatd publish`
// both build their pool from these keys (daemon.PoolOptions).
func TestExampleStatesPoolDefaults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	pool, def := uploader.Defaults(), Default()
	for _, c := range []struct {
		key       string
		table, in any
	}{
		{"workers", pool.Workers, def.Workers},
		{"upload.parallel_parts", pool.ParallelParts, def.Upload.ParallelParts},
		{"settle", pool.Timing.Settle, def.Settle.D()},
		{"poll.interval", pool.Timing.Poll.Interval, def.Poll.Interval.D()},
		{"poll.max_interval", pool.Timing.Poll.MaxInterval, def.Poll.MaxInterval.D()},
		{"poll.timeout", pool.Timing.Poll.Timeout, def.Poll.Timeout.D()},
		{"incomplete_timeout", pool.Timing.IncompleteTimeout, def.IncompleteTimeout.D()},
		{"api.max_server_wait", pool.Timing.MaxServerWait, def.API.MaxServerWait.D()},
	} {
		stated, err := exampleValue(doc, c.key, c.table)
		if err != nil {
			t.Errorf("config.example.yaml %s: %v", c.key, err)
			continue
		}
		if stated != c.table || c.in != c.table {
			t.Errorf("%s: config.example.yaml states %v, Default %v, uploader.Defaults %v; want one value", c.key, stated, c.in, c.table)
		}
	}
}

// exampleValue reads the dotted key from doc as the table's type: an int,
// or a duration written in Go syntax.
func exampleValue(doc map[string]any, key string, like any) (any, error) {
	var v any = doc
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no key %s", k)
		}
		if v, ok = m[k]; !ok {
			return nil, fmt.Errorf("no key %s", k)
		}
	}
	if _, ok := like.(time.Duration); ok {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a duration", v)
		}
		return time.ParseDuration(s)
	}
	return v, nil
}

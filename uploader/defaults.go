package uploader

import (
	"time"

	"github.com/splatd/splatd/state"
)

// Defaults is the one table of the pool's settings: what NewPool gives an
// option left zero, and what config.Default and config.example.yaml state
// (a config test compares the three). `splatd run` and `splatd publish`
// both start from it.
func Defaults() PoolOptions {
	return PoolOptions{
		Workers:       2,
		ParallelParts: 4,
		Timing: Timing{
			Settle: 5 * time.Second,
			Poll: PollOptions{
				Interval:    5 * time.Second,
				MaxInterval: 60 * time.Second,
				Timeout:     2 * time.Hour,
			},
			Grace:             20 * time.Second,
			URLMaxAge:         10 * time.Minute,
			TokenRecheck:      2 * time.Second,
			PeerWait:          2 * time.Minute,
			IncompleteTimeout: state.DefaultIncompleteTimeout,
			MaxServerWait:     state.DefaultMaxServerWait,
		},
	}
}

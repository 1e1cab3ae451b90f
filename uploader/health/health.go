// Package health is the worker pool's health: the token pause (the API
// refuses the token), the configuration pause (an error no retry can fix)
// and the job store's failures. Each is one view all workers share; the
// pool asks it whether to wait and tells it what its steps found
// (docs/architecture.md, "The uploader core").
package health

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
)

// Env is what every view is given by the pool.
type Env struct {
	Log    zerolog.Logger
	Now    func() time.Time
	Policy state.Policy // the one retry rule, with the pool's patience
	Wake   func()       // tells idle workers to claim again
}

// Until returns a channel closed when the token pause or, when there is
// none, the configuration pause ends; nil while neither pauses the pool.
func Until(t *Token, c *Config) <-chan struct{} {
	if ch := t.Until(); ch != nil {
		return ch
	}
	return c.Until()
}

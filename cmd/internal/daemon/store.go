package daemon

import (
	"errors"
	"fmt"

	"github.com/splatd/splatd/queue"
)

// openStore opens the state: a damaged file is an error naming it, what is
// wrong and the command that recovers; an empty start is said.
func (d *Daemon) openStore() (*queue.Store, error) {
	cfg := d.cfg
	command := "splatd state recover"
	if d.o.ConfigPath != "" {
		command += " -config " + d.o.ConfigPath
	}
	st, err := queue.Open(cfg.StateDir, queue.Options{
		Logger:         d.log.With().Str("component", "queue").Logger(),
		Identity:       cfg.FleetIdentity(),
		RecoverCommand: command,
		OnDamaged:      d.storeDamaged,
	})
	if errors.Is(err, queue.ErrLocked) {
		return nil, fmt.Errorf("another splatd is using %s (state_dir); stop it first or give this one its own state_dir", cfg.StateDir)
	}
	if err != nil {
		return nil, err
	}
	if why := st.Fresh(); why != "" {
		ev := d.log.Info()
		if why != "there was no "+queue.FileName {
			ev = d.log.Warn()
		}
		msg := "starting with an empty job store (" + why + "): a file whose receipt proves it published is adopted as done, not published again; the others are published"
		if !cfg.After.Receipt {
			msg += "; receipts are off (after.receipt: false), so every file found is published"
		}
		ev.Str("state_dir", cfg.StateDir).Msg(msg)
	}
	return st, nil
}

// storeDamaged is the store's OnDamaged: bbolt panicked on a damaged page
// after start. The store refuses every call from now on, /readyz says why,
// and the daemon stops with the error (exit 1).
func (d *Daemon) storeDamaged(e *queue.DamagedError) {
	d.log.Error().Err(e).Str("stack", e.Stack).Msg("the job store is damaged: stopping")
	select {
	case d.damaged <- e:
	default:
	}
}

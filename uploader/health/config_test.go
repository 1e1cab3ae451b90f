package health

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// configEnv is a configuration pause whose observed kinds are recorded.
func configEnv(p state.Policy) (*testEnv, *Config, *[]string) {
	e := newTestEnv(p)
	var seen []string
	c := NewConfig(e.Env, func(kind string, active bool) { seen = append(seen, fmt.Sprintf("%s:%v", kind, active)) })
	return e, c, &seen
}

// TestConfigChangedEndsPause: a pause far longer than the test ends on
// Changed and wakes the workers; the error stays until a network step
// succeeds.
func TestConfigChangedEndsPause(t *testing.T) {
	t.Parallel()
	e, c, seen := configEnv(patience(state.ProfileConfig, time.Hour, time.Hour))
	tls := errors.New("x509: certificate signed by unknown authority")
	c.Pause(state.Decision{Action: state.WaitConfig, Kind: state.ConfigTLS}, tls)
	ch := c.Until()
	if ch == nil {
		t.Fatal("Until = nil while paused")
	}
	c.Changed()
	select {
	case <-ch:
	default:
		t.Fatal("the pause did not end on Changed")
	}
	if c.Until() != nil {
		t.Error("Until != nil after Changed")
	}
	if e.wakes.Load() != 1 {
		t.Errorf("%d wakes, want 1", e.wakes.Load())
	}
	if err, kind, since := c.Err(); err != tls || kind != state.ConfigTLS || !since.Equal(e.Now()) {
		t.Errorf("Err after Changed = %v, %q, %v; want the error until a step works", err, kind, since)
	}
	c.Worked(state.Queued) // no network: proves nothing
	if err, _, _ := c.Err(); err == nil {
		t.Error("a queued step cleared the configuration error")
	}
	c.Worked(state.Signed)
	if err, _, _ := c.Err(); err != nil {
		t.Errorf("Err after a signed step worked = %v", err)
	}
	if want := []string{"tls:true", "tls:false"}; !reflect.DeepEqual(*seen, want) {
		t.Errorf("observed %v, want %v", *seen, want)
	}
}

// TestConfigPauseEndsByItself: the pause ends after its ConfigPause step
// and wakes the workers; a second kind replaces the first.
func TestConfigPauseEndsByItself(t *testing.T) {
	t.Parallel()
	e, c, seen := configEnv(patience(state.ProfileConfig, time.Millisecond, time.Millisecond))
	c.Pause(state.Decision{Action: state.WaitConfig, Kind: state.ConfigTLS}, errors.New("x509"))
	ch := c.Until()
	<-e.woken
	<-ch
	c.Pause(state.Decision{Action: state.WaitConfig, Kind: state.ConfigDNS}, errors.New("no such host"))
	if _, kind, _ := c.Err(); kind != state.ConfigDNS {
		t.Errorf("kind = %q, want %q", kind, state.ConfigDNS)
	}
	if want := []string{"tls:true", "tls:false", "dns:true"}; !reflect.DeepEqual(*seen, want) {
		t.Errorf("observed %v, want %v", *seen, want)
	}
	if n := e.log.count("configuration error no retry can fix"); n != 2 {
		t.Errorf("%d error lines, want one per kind", n)
	}
}

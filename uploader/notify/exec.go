package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// run runs one command with the event on stdin, within its timeout.
func (n *Notifier) run(ctx context.Context, d delivery) {
	timeout := d.cmd.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	log := n.log.With().Str("kind", KindExec).Str("command", d.cmd.Argv[0]).
		Uint64("job", d.ev.Job).Str("event", d.ev.Event).Logger()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cmd.Argv[0], d.cmd.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(d.body)
	out := &capped{limit: n.o.OutputLimit}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = n.environ(d.ev)
	// A grandchild that keeps the output pipe open must not hold us past
	// the kill.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Seconds()
	if err == nil {
		log.Info().Float64("took_s", took).Str("output", out.String()).Msg("command done")
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("killed after its timeout of %s: %w", timeout, err)
	}
	n.o.Observer.NotifyError(KindExec)
	log.Warn().Err(err).Float64("took_s", took).Str("output", out.String()).Msg("command failed")
}

// environ is the command's environment: the daemon's without the token,
// plus the event's variables.
func (n *Notifier) environ(ev Event) []string {
	set := []string{
		"SPLATD_EVENT=" + ev.Event,
		"SPLATD_FILE=" + ev.File,
		fmt.Sprintf("SPLATD_JOB=%d", ev.Job),
		"SPLATD_SPLAT_URL=" + ev.Splat.URL,
	}
	skip := map[string]bool{tokenEnv: true}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		skip[k] = true
	}
	var env []string
	for _, kv := range n.o.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !skip[k] && !NamesCredential(k) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// credentialWords are the name parts (split at "_", any case) that mark a
// variable as a credential; credentialParts mark it wherever they appear
// in the name (GITHUB_TOKEN, MYSQLPASSWORD, AWS_SECRET_ACCESS_KEY).
var (
	credentialWords = map[string]bool{
		"KEY": true, "KEYS": true, "APIKEY": true, "AUTH": true, "PASS": true,
		"PASSPHRASE": true, "COOKIE": true, "SESSION": true, "BEARER": true,
	}
	credentialParts = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE"}
)

// NamesCredential reports whether the environment variable name names a
// credential (CREDENTIALS_DIRECTORY, credentialParts, credentialWords), which
// an after.exec command never inherits.
func NamesCredential(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range credentialParts {
		if strings.Contains(up, p) {
			return true
		}
	}
	for _, w := range strings.Split(up, "_") {
		if credentialWords[w] {
			return true
		}
	}
	return false
}

// capped keeps the first limit bytes written to it and counts the rest; it
// never fails a write, so a chatty command is not killed by a broken pipe.
type capped struct {
	mu      sync.Mutex // stdout and stderr are copied by two goroutines
	limit   int
	b       bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - c.b.Len()
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		c.b.Write(p[:room])
	}
	c.dropped += len(p) - max(room, 0)
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(c.b.String())
	if c.dropped > 0 {
		s += fmt.Sprintf(" … (%d more bytes)", c.dropped)
	}
	return s
}

package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
)

// TestStoreDamagedWhileRunning: the state file's pages zeroed under a
// running daemon make bbolt panic at the next transaction (the store probe
// here, a claim as often): the daemon does not crash, /readyz names the
// damage, and Run stops with the error naming the file and the command
// that recovers.
func TestStoreDamagedWhileRunning(t *testing.T) {
	cfg := testConfig(t, "tok-"+strings.Repeat("d", 20), "metrics: {listen: \"127.0.0.1:0\"}\nrescan_interval: 0s\n")
	d, err := Open(cfg, Options{Logger: zerolog.Nop(), ConfigPath: "/etc/splatd/test.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.intake.probeEvery = 10 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + d.metrics.Addr() + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	path := filepath.Join(cfg.StateDir, queue.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if _, err := f.WriteAt(make([]byte, fi.Size()-2*page), 2*page); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = <-done
	if !errors.Is(err, queue.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "splatd state recover -config /etc/splatd/test.yaml") {
		t.Fatalf("Run: %v", err)
	}
	if why := d.ready(); why == nil || !strings.Contains(why.Error(), "is damaged") {
		t.Fatalf("ready: %v", why)
	}

}

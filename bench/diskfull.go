package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

func newHTTPClient() *http.Client { return &http.Client{Timeout: 2 * time.Second} }

// mountSmall mounts a small filesystem at dir: a 2 MiB tmpfs, or failing
// that a loop-mounted 2 MiB ext4 image. It returns the unmount function, or
// an error saying why neither was possible.
func mountSmall(dir, scratch string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	umount := func() {
		for range 50 { // bounded: a busy mount is retried for 5 s at most
			err := syscall.Unmount(dir, 0)
			if err == nil || errors.Is(err, syscall.EINVAL) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	tmpfsErr := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0755")
	if tmpfsErr == nil {
		return umount, nil
	}
	img := filepath.Join(scratch, "state.ext4")
	f, err := os.Create(img)
	if err != nil {
		return nil, err
	}
	f.Truncate(2 << 20)
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tmpfs mount: %v; mkfs.ext4: %v %s", tmpfsErr, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tmpfs mount: %v; loop mount: %v %s", tmpfsErr, err, strings.TrimSpace(string(out)))
	}
	return umount, nil
}

// fill writes a filler file in dir until the filesystem is full.
func fill(dir string) (int64, error) {
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	var n int64
	for range 1 << 16 { // bounded: 1 GiB at most
		k, err := f.Write(buf)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, errors.New("filesystem never filled up")
}

// runDiskFull: the state directory lives on a 2 MiB filesystem. Half the
// files go through, then the filesystem is filled while the daemon runs and
// the other half arrives. The daemon must say so (error logs or a failed
// exit), keep its state consistent, and publish everything once space is
// freed. A supervisor restarts it after a failed exit every second, as
// systemd's Restart=on-failure would (RestartSec=5s there).
func runDiskFull(ctx context.Context, e *tenv) error {
	stateDir := filepath.Join(e.dir, "state")
	umount, err := mountSmall(stateDir, e.dir)
	if err != nil {
		return &skipError{reason: err.Error()}
	}
	defer umount()
	if err := e.setup(apisim.Options{}, DaemonConfig{StateDir: stateDir, Rescan: 2 * time.Second}); err != nil {
		return err
	}
	defer e.stop() // before the unmount
	half := e.count(3, 8)
	if err := e.start(); err != nil {
		return err
	}
	if err := e.writeFiles(0, half, 200); err != nil {
		return err
	}
	if !e.waitFinal(ctx, 30*time.Second) {
		return errors.New("the first half did not finish before the disk was filled")
	}
	filled, err := fill(stateDir)
	if err != nil {
		return err
	}
	if err := e.writeFiles(half, half, 200); err != nil {
		return err
	}
	// While full: watch for 6 s, restarting the daemon whenever it exits.
	exits, err := e.supervise(ctx, time.Now().Add(6*time.Second), func() bool { return false })
	if err != nil {
		return err
	}
	errs := 0
	// Count error logs of every run so far (the log file is appended to).
	if b, err := os.ReadFile(e.logPath); err == nil {
		errs = strings.Count(string(b), `"level":"error"`)
	}
	doneWhileFull, _ := e.receipts()
	e.note("state filesystem filled (%d KiB filler); while full for 6 s: %d error log lines, %d daemon exits, %d/%d files final",
		filled>>10, errs, exits, doneWhileFull, len(e.files))
	// A daemon whose job store still had free pages for the second half
	// (bbolt reuses them) finished every file with nothing to report: that
	// is no miss. One that fell behind must have said why.
	if errs == 0 && exits == 0 && doneWhileFull < len(e.files) {
		e.problem("the daemon reported nothing while its state directory was full")
	}
	if err := os.Remove(filepath.Join(stateDir, "filler")); err != nil {
		return err
	}
	freed := time.Now()
	// Space is back: keep supervising until every file is final.
	more, err := e.supervise(ctx, time.Now().Add(e.timeout()/2), func() bool {
		f, _ := e.receipts()
		return f == len(e.files)
	})
	exits += more
	if err != nil {
		return err
	}
	if f, _ := e.receipts(); f != len(e.files) {
		e.problem("only %d of %d files finished after space was freed", f, len(e.files))
	} else {
		e.note("recovered: every file final %s after space was freed (%d daemon exits in all)", time.Since(freed).Round(100*time.Millisecond), exits)
	}
	e.verdict()
	return nil
}

// supervise restarts the daemon whenever it exits, as Restart=on-failure
// would, until end or until done reports true; it returns the exits seen.
func (e *tenv) supervise(ctx context.Context, end time.Time, done func() bool) (int, error) {
	exits := 0
	for time.Now().Before(end) && ctx.Err() == nil && !done() {
		select {
		case <-e.d.Done():
			exits++
			time.Sleep(time.Second)
			if err := e.start(); err != nil {
				return exits, err
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	return exits, nil
}

package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// The studio-size folder: folderDirs folders of folderFiles published
// files, each with its receipt beside it.
const (
	folderDirs  = 1000
	folderFiles = 100
)

// FolderFigures measures a watch folder of 100,000 published files (a
// receipt beside each): the first start on an empty state (every file
// adopted from its receipt), the first start after `splatd adopt`, then a
// restart's start-up scan and one periodic rescan against `find -type f`
// of the same tree, splatd.db's bytes per finished job and the daemon's
// peak RSS.
func FolderFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	sim, err := apisim.New(apisim.Options{Dir: filepath.Join(o.Dir, "folders-sim")})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	cfg := DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, "folders"), Rescan: 20 * time.Second, LogLevel: "debug"}
	cfgPath, err := cfg.Write()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := buildReceiptedTree(cfg.Inbox); err != nil {
		return nil, err
	}
	n := folderDirs * folderFiles
	o.logf("folders: built %d files and receipts in %s", n, time.Since(t0).Round(100*time.Millisecond))
	findWall, findCPU, err := findFloor(ctx, cfg.Inbox)
	if err != nil {
		return nil, err
	}

	var figs []Figure
	adoptRSS, adoptTook, err := firstStart(ctx, o, cfgPath, cfg, n, true)
	if err != nil {
		return nil, fmt.Errorf("folders, first start: %w", err)
	}
	dbBytes, err := fileSize(filepath.Join(cfg.StateDir, "splatd.db"))
	if err != nil {
		return nil, err
	}
	perJob := float64(dbBytes) / float64(n)
	figs = append(figs,
		Figure{Name: "folder_100k_first_start_peak_rss", Value: round(adoptRSS, 1), Unit: "MiB", Target: "<= 64", Met: met(adoptRSS <= 64),
			Note: fmt.Sprintf("an empty state on 100,000 files with receipts: every file adopted from its receipt, in %s", adoptTook.Round(100*time.Millisecond))},
		Figure{Name: "folder_100k_db_bytes_per_job", Value: round(perJob, 0), Unit: "bytes", Target: "<= 1024", Met: met(perJob <= 1024),
			Note: fmt.Sprintf("splatd.db %.1f MiB for %d finished jobs", float64(dbBytes)/(1<<20), n)})

	ownRSS, _, err := firstStart(ctx, o, cfgPath, cfg, n, false)
	if err != nil {
		return figs, fmt.Errorf("folders, restart after the daemon's adoption: %w", err)
	}
	figs = append(figs, Figure{Name: "folder_100k_restart_after_own_adoption_peak_rss", Value: round(ownRSS, 1), Unit: "MiB", Target: "<= 64", Met: met(ownRSS <= 64),
		Note: "the daemon started again on the state its first start wrote, to the end of its start-up scan"})

	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return figs, err
	}
	out, err := exec.CommandContext(ctx, o.Bin, "adopt", "-config", cfgPath, cfg.Inbox).CombinedOutput()
	if err != nil {
		return figs, fmt.Errorf("splatd adopt: %v: %s", err, out)
	}
	adoptBytes, err := fileSize(filepath.Join(cfg.StateDir, "splatd.db"))
	if err != nil {
		return figs, err
	}
	adoptPerJob := float64(adoptBytes) / float64(n)
	figs = append(figs, Figure{Name: "folder_100k_adopt_db_bytes_per_job", Value: round(adoptPerJob, 0), Unit: "bytes", Target: "<= 1024", Met: met(adoptPerJob <= 1024),
		Note: fmt.Sprintf("splatd.db %.1f MiB after `splatd adopt` of the folder on an empty state", float64(adoptBytes)/(1<<20))})
	afterRSS, _, err := firstStart(ctx, o, cfgPath, cfg, n, false)
	if err != nil {
		return figs, fmt.Errorf("folders, first start after adopt: %w", err)
	}
	figs = append(figs, Figure{Name: "folder_100k_first_start_after_adopt_peak_rss", Value: round(afterRSS, 1), Unit: "MiB", Target: "<= 64", Met: met(afterRSS <= 64),
		Note: "`splatd adopt` on the folder, then the daemon's first start"})

	firstFind, _, err := findOnce(ctx, cfg.Inbox)
	if err != nil {
		return figs, err
	}
	scan, err := restartScans(ctx, o, cfgPath, cfg)
	if err != nil {
		return figs, fmt.Errorf("folders, restart: %w", err)
	}
	pairs := []scanPair{{find: firstFind, scan: scan.startWall}}
	for range startupPairs - 1 {
		p, err := startupPair(ctx, o, cfgPath, cfg)
		if err != nil {
			return figs, fmt.Errorf("folders, restart: %w", err)
		}
		pairs = append(pairs, p)
	}
	var ratios []float64
	var shown []string
	for _, p := range pairs {
		ratios = append(ratios, p.scan.Seconds()/p.find.Seconds())
		shown = append(shown, fmt.Sprintf("%s/%s", p.scan.Round(time.Millisecond), p.find.Round(time.Millisecond)))
	}
	startRatio := median(ratios)
	rescanRatio := scan.rescanCPU.Seconds() / findCPU.Seconds()
	floor := fmt.Sprintf("find -type f of the same tree (%d files with their receipts): %s wall, %s CPU, median of 3 warm runs",
		2*n, findWall.Round(time.Millisecond), findCPU.Round(time.Millisecond))
	figs = append(figs,
		Figure{Name: "folder_100k_restart_ready", Value: round(scan.ready.Seconds()*1000, 0), Unit: "ms", Note: "exec to /readyz 200 with 100,000 finished jobs"},
		Figure{Name: "folder_100k_startup_scan_ratio_to_find", Value: round(startRatio, 2), Unit: "ratio", Target: "<= 3", Met: met(startRatio <= 3),
			Note: fmt.Sprintf("median of %d restarts, each right after a warm find -type f of the same tree (%d files with their receipts): the start-up scan's own wall time (the daemon's scan done log) / find's, %s",
				len(pairs), 2*n, strings.Join(shown, ", "))},
		Figure{Name: "folder_100k_rescan_cpu_ratio_to_find", Value: round(rescanRatio, 2), Unit: "ratio", Target: "<= 3", Met: met(rescanRatio <= 3),
			Note: fmt.Sprintf("the daemon's CPU from the end of one scan to the end of the next (%s, idle time included; the rescan took %s wall); %s",
				scan.rescanCPU.Round(time.Millisecond), scan.rescanWall.Round(time.Millisecond), floor)},
		Figure{Name: "folder_100k_restart_peak_rss", Value: round(scan.rss, 1), Unit: "MiB", Target: "<= 64", Met: met(scan.rss <= 64),
			Note: fmt.Sprintf("after the start-up scan and one rescan; then %.1f MiB anonymous, %.1f MiB file-backed (bbolt's mmap and the binary)", scan.anon, scan.file)})
	return figs, nil
}

// buildReceiptedTree writes folderDirs × folderFiles small PLYs under
// inbox with a receipt beside each that says it was published.
func buildReceiptedTree(inbox string) error {
	var ply []byte
	now := time.Now().UTC().Truncate(time.Second)
	for d := range folderDirs {
		dir := filepath.Join(inbox, fmt.Sprintf("shoot-%04d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for f := range folderFiles {
			p := filepath.Join(dir, fmt.Sprintf("take-%03d.ply", f))
			data, err := samplePLY(&ply, fmt.Sprintf("folder %d %d", d, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			id := fmt.Sprintf("%d", d*folderFiles+f+1)
			r := after.Receipt{File: filepath.Base(p), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Title: filepath.Base(p),
				Format: "ply", Status: "done", Protocol: "legacy", PublishedAt: &now, CompletedAt: &now, Job: uint64(d*folderFiles + f + 1),
				Splat: after.ReceiptSplat{ID: id, Hash: "h" + id}}
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := os.WriteFile(after.ReceiptPath(p), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// samplePLY is a one-splat PLY tagged so that every file's content differs;
// buf keeps the untagged sample between calls.
func samplePLY(buf *[]byte, tag string) ([]byte, error) {
	if *buf == nil {
		var b bytes.Buffer
		if err := splatfile.WritePLY(&b, 1); err != nil {
			return nil, err
		}
		*buf = b.Bytes()
	}
	return bytes.Replace(*buf, []byte("comment splatd sample\n"), []byte("comment splatd bench "+tag+"\n"), 1), nil
}

// findFloor runs `find dir -type f` three times after a warm-up and returns
// the medians of its wall and CPU (user + system) time.
func findFloor(ctx context.Context, dir string) (wall, cpu time.Duration, err error) {
	var walls, cpus []float64
	for i := range 4 {
		w, c, err := findOnce(ctx, dir)
		if err != nil {
			return 0, 0, err
		}
		if i > 0 {
			walls, cpus = append(walls, w.Seconds()), append(cpus, c.Seconds())
		}
	}
	return time.Duration(median(walls) * 1e9), time.Duration(median(cpus) * 1e9), nil
}

// findOnce is the wall and CPU (user + system) time of one `find dir -type f`.
func findOnce(ctx context.Context, dir string) (wall, cpu time.Duration, err error) {
	cmd := exec.CommandContext(ctx, "find", dir, "-type", "f")
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("find: %w", err)
	}
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// firstStart starts the daemon on cfg and waits until it has adopted n
// files from their receipts (adopted: false waits for a scan instead, for
// a state `splatd adopt` made); it returns the peak RSS in MiB and how long
// it took.
func firstStart(ctx context.Context, o BenchOptions, cfgPath string, cfg DaemonConfig, n int, adopted bool) (float64, time.Duration, error) {
	d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd.log"))
	if err != nil {
		return 0, 0, err
	}
	defer d.Stop(time.Minute)
	if !adopted {
		if _, err := d.WaitScan(ctx, 1, 15*time.Minute); err != nil {
			return 0, 0, err
		}
	}
	end := time.Now().Add(15 * time.Minute)
	for adopted && d.Adopted() < n {
		if time.Now().After(end) || ctx.Err() != nil {
			return 0, 0, fmt.Errorf("%d of %d files adopted in time", d.Adopted(), n)
		}
		select {
		case <-d.Done():
			return 0, 0, fmt.Errorf("splatd exited: %v", d.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	took := time.Since(d.Started)
	hwm, err := d.VmHWM()
	anon, file, _ := d.RssSplit()
	o.logf("folders: first start (adopting: %v): VmHWM %.1f MiB; now %.1f MiB anonymous, %.1f MiB file-backed (%s)", adopted, float64(hwm)/(1<<20), float64(anon)/(1<<20), float64(file)/(1<<20), mappedText(d))
	return float64(hwm) / (1 << 20), took, err
}

// mappedText lists the daemon's file-backed resident memory by file, the
// larger first.
func mappedText(d *Daemon) string {
	m, err := d.RssOf()
	if err != nil {
		return err.Error()
	}
	files := make([]string, 0, len(m))
	for f := range m {
		files = append(files, f)
	}
	sort.Slice(files, func(a, b int) bool { return m[files[a]] > m[files[b]] })
	var parts []string
	for _, f := range files {
		if m[f] >= 1<<20 {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB", filepath.Base(f), float64(m[f])/(1<<20)))
		}
	}
	return strings.Join(parts, ", ")
}

// startupPairs is how many restarts the start-up scan's figure is the
// median of.
const startupPairs = 3

// scanPair is one warm `find -type f` and the start-up scan of the restart
// right after it.
type scanPair struct{ find, scan time.Duration }

// startupPair runs find once, then starts the daemon on a state that knows
// every file until its start-up scan is done.
func startupPair(ctx context.Context, o BenchOptions, cfgPath string, cfg DaemonConfig) (scanPair, error) {
	var p scanPair
	var err error
	if p.find, _, err = findOnce(ctx, cfg.Inbox); err != nil {
		return p, err
	}
	d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd-restart.log"))
	if err != nil {
		return p, err
	}
	defer d.Stop(time.Minute)
	p.scan, err = d.WaitScan(ctx, 1, 5*time.Minute)
	return p, err
}

// scanFigures are what restartScans measured.
type scanFigures struct {
	ready, startWall, rescanWall, rescanCPU time.Duration
	rss, anon, file                         float64
}

// restartScans starts the daemon on a state that knows every file and
// measures its start-up scan and the next periodic rescan.
func restartScans(ctx context.Context, o BenchOptions, cfgPath string, cfg DaemonConfig) (scanFigures, error) {
	var f scanFigures
	d, err := StartDaemon(o.Bin, cfgPath, filepath.Join(cfg.Dir, "splatd-restart.log"))
	if err != nil {
		return f, err
	}
	defer d.Stop(time.Minute)
	if f.ready, err = d.WaitReady(5 * time.Minute); err != nil {
		return f, err
	}
	first, err := d.WaitScan(ctx, 1, 5*time.Minute)
	if err != nil {
		return f, err
	}
	cpu1, _, _, err := procCPU(d.PID())
	if err != nil {
		return f, err
	}
	second, err := d.WaitScan(ctx, 2, 5*time.Minute)
	if err != nil {
		return f, err
	}
	cpu2, _, _, err := procCPU(d.PID())
	if err != nil {
		return f, err
	}
	hwm, err := d.VmHWM()
	anon, file, _ := d.RssSplit()
	o.logf("folders: restart: file-backed %s", mappedText(d))
	f.anon, f.file = float64(anon)/(1<<20), float64(file)/(1<<20)
	f.startWall, f.rescanWall, f.rescanCPU, f.rss = first, second, cpu2-cpu1, float64(hwm)/(1<<20)
	return f, err
}

func fileSize(p string) (int64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

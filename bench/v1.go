package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/splatd/splatd/uploader/apisim"
)

// The v1 figures' part sizes, chosen by the simulator as the server would:
// 64 MiB is docs/api-v1.md's example; the resume figure uses 8 MiB parts, near
// S3's 5 MiB minimum, so that its bound (parallel_parts × partSize) is
// tight.
const (
	v1PartSize       = 64 << 20
	v1ResumePartSize = 8 << 20
	v1Parallel       = 4
)

// v1Run is `splatd run` with api.protocol v1 publishing one sparse file.
type v1Run struct {
	o       BenchOptions
	cfg     DaemonConfig
	cfgPath string
	file    string
	size    int64
	d       *Daemon
}

// newV1Run writes the config and the file (in a folder of its own under
// o.Dir) and starts the daemon.
func newV1Run(o BenchOptions, sim *apisim.Server, name string, size int64) (*v1Run, error) {
	r := &v1Run{o: o, cfg: DaemonConfig{Sim: sim, Dir: filepath.Join(o.Dir, name), Workers: 1, Protocol: "v1", ParallelParts: v1Parallel}}
	var err error
	if r.cfgPath, err = r.cfg.Write(); err != nil {
		return nil, err
	}
	r.file = filepath.Join(r.cfg.Inbox, name+".ply")
	if r.size, err = WriteSparsePLY(r.file, fmt.Sprintf("%s %d", name, time.Now().UnixNano()), size); err != nil {
		return nil, err
	}
	return r, r.start()
}

func (r *v1Run) start() (err error) {
	r.d, err = StartDaemon(r.o.Bin, r.cfgPath, filepath.Join(r.cfg.Dir, "splatd.log"))
	return err
}

// close stops the daemon (if it runs) and removes the file.
func (r *v1Run) close() {
	if r.d != nil {
		select {
		case <-r.d.Done():
		default:
			r.d.Stop(30 * time.Second)
		}
	}
	os.Remove(r.file)
}

// sessionTotals adds up the simulator's per-session storage counters.
func sessionTotals(st apisim.Stats) (received, stored int64, resent int) {
	for _, s := range st.Sessions {
		received += s.BytesReceived
		stored += s.PartBytes
		resent += s.PartsResent
	}
	return received, stored, resent
}

// waitSessions polls the simulator every 2 ms until cond holds for its
// per-session totals, the daemon exits or timeout passes.
func waitSessions(ctx context.Context, sim *apisim.Server, d *Daemon, timeout time.Duration, cond func(received, stored int64) bool) error {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) && ctx.Err() == nil {
		received, stored, _ := sessionTotals(sim.Stats())
		if cond(received, stored) {
			return nil
		}
		select {
		case <-d.Done():
			return fmt.Errorf("splatd exited: %v", d.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return fmt.Errorf("storage did not get there within %s", timeout)
}

// V1Figures are issue 11's figures for the v1 protocol, each run with a
// fresh daemon (api.protocol v1, upload.parallel_parts 4) and one sparse
// file: the bytes re-sent after a SIGKILL at half a 1 GiB upload, the
// throughput of a 1 GiB publish against `curl -T` when storage caps each
// connection, and the peak RSS publishing 256 MiB and 2 GiB.
func V1Figures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	var figs []Figure
	for _, fn := range []func(context.Context, BenchOptions) ([]Figure, error){v1ResumeFigures, v1ThroughputFigures, v1RSSFigures} {
		f, err := fn(ctx, o)
		figs = append(figs, f...)
		if err != nil {
			return figs, err
		}
	}
	return figs, nil
}

// v1ResumeFigures publishes a 1 GiB file in 8 MiB parts, SIGKILLs the
// daemon once storage has received half of it, restarts it and waits for
// the receipt. Every body byte storage read, for every session, refused or
// reset PUTs included, is counted by the simulator; what it read beyond
// the file's size was sent twice. The bound is what the parts in flight at
// the kill can hold: parallel_parts × partSize.
func v1ResumeFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	// The cap (4 × 64 MB/s) stretches the upload over seconds, so that the
	// kill lands near half however fast the machine is.
	sim, err := apisim.New(apisim.Options{DiscardObjects: true, ProcessingDelay: 100 * time.Millisecond, Dir: filepath.Join(o.Dir, "v1-resume-sim"),
		PartSize: v1ResumePartSize, StorageBandwidth: 64e6})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	r, err := newV1Run(o, sim, "v1-resume", 1<<30)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := waitSessions(ctx, sim, r.d, 5*time.Minute, func(received, _ int64) bool { return received >= r.size/2 }); err != nil {
		return nil, fmt.Errorf("v1 resume, before the kill: %w", err)
	}
	r.d.Kill()
	time.Sleep(200 * time.Millisecond) // storage's handlers see the reset and stop counting
	atKill := sim.Stats()
	recvKill, heldKill, _ := sessionTotals(atKill)
	if err := r.start(); err != nil {
		return nil, err
	}
	if err := waitReceipt(ctx, r.d, r.file, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("v1 resume, after the restart: %w", err)
	}
	end := sim.Stats()
	received, stored, partsResent := sessionTotals(end)
	sessions := sim.Sessions()
	if len(sessions) != 1 || end.V1Splats != 1 {
		return nil, fmt.Errorf("v1 resume: %d sessions and %d splats, want 1 and 1 (the restart must resume the session)", len(sessions), end.V1Splats)
	}
	partSize := sessions[0].PartSize
	bound := int64(v1Parallel) * partSize
	resent := received - r.size
	o.logf("v1 resume: killed at %.0f%% received (%.0f%% stored in parts); %d MiB received in all for %d MiB", 100*float64(recvKill)/float64(r.size),
		100*float64(heldKill)/float64(r.size), received>>20, r.size>>20)
	return []Figure{
		{Name: "v1_resume_resent_bytes", Value: float64(resent), Unit: "bytes", Target: fmt.Sprintf("<= %d", bound), Met: met(resent <= bound),
			Note: fmt.Sprintf("%.1f MiB; bound parallel_parts %d x partSize %d MiB; 1 GiB file killed with %.0f%% received, %.0f%% stored in parts; "+
				"%d MiB read after the restart, %d part PUTs of a part already held; stored %d MiB",
				float64(resent)/(1<<20), v1Parallel, partSize>>20, 100*float64(recvKill)/float64(r.size), 100*float64(heldKill)/float64(r.size),
				(received-recvKill)>>20, partsResent, stored>>20)},
	}, nil
}

// v1ThroughputFigures times a 1 GiB v1 publish (4 parts in flight) under
// a per-connection storage cap against `curl -T` of the same file, and
// measures again at 10 MB/s on 256 MiB when the machine's CPU, not the
// cap, was the limit (bench/README.md).
func v1ThroughputFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		return []Figure{{Name: "v1_throughput_ratio_to_curl", Value: math.NaN(), Unit: "ratio", Note: "skipped: " + err.Error()}}, nil
	}
	figs, cpuBound, err := v1Throughput(ctx, o, curl, 40e6, 1<<30, "")
	if err != nil || !cpuBound {
		return figs, err
	}
	more, _, err := v1Throughput(ctx, o, curl, 10e6, 256<<20, "_10MBps")
	return append(figs, more...), err
}

func v1Throughput(ctx context.Context, o BenchOptions, curl string, capBps float64, size int64, suffix string) (figs []Figure, cpuBound bool, err error) {
	sim, err := apisim.New(apisim.Options{DiscardObjects: true, ProcessingDelay: 100 * time.Millisecond, Dir: filepath.Join(o.Dir, "v1-throughput-sim"+suffix),
		PartSize: v1PartSize, StorageBandwidth: int64(capBps),
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000}})
	if err != nil {
		return nil, false, err
	}
	defer sim.Close()
	r, err := newV1Run(o, sim, "v1-throughput"+suffix, size)
	if err != nil {
		return nil, false, err
	}
	defer r.close()
	sent := sampleSent(ctx, r.d, r.size)
	if err := waitSessions(ctx, sim, r.d, 10*time.Minute, func(_, stored int64) bool { return stored >= r.size }); err != nil {
		return nil, false, fmt.Errorf("v1 throughput: %w", err)
	}
	stamps := sim.Stats()
	took := stamps.LastPartStored.Sub(stamps.FirstBodyByte)
	clientTook := <-sent
	if err := waitReceipt(ctx, r.d, r.file, 5*time.Minute); err != nil {
		return nil, false, fmt.Errorf("v1 throughput: %w", err)
	}
	st := sim.Stats()
	received, _, _ := sessionTotals(st)
	conns, maxConn := 0, int64(0)
	for _, c := range st.StorageConns {
		if c.Bytes > 0 {
			conns++
			maxConn = max(maxConn, c.Bytes)
		}
	}
	r.d.Stop(30 * time.Second)
	daemonBps := float64(r.size) / took.Seconds()
	clientBps := math.NaN()
	if clientTook > 0 {
		clientBps = float64(r.size) / clientTook.Seconds()
	}
	agree := clientBps / daemonBps
	curlBps, err := curlPut(ctx, curl, sim, r.file, r.size)
	if err != nil {
		return nil, false, err
	}
	ratio := daemonBps / curlBps
	capMB := capBps / 1e6
	cpuBound = daemonBps < 0.85*v1Parallel*capBps && curlBps >= 0.9*capBps
	note := fmt.Sprintf("storage capped at %.0f MB/s per connection; %d MiB in %d MiB parts, %d in flight; %.0f MiB read by storage on %d connections (at most %d MiB on one); %.2f x %d x the cap",
		capMB, r.size>>20, v1PartSize>>20, v1Parallel, float64(received)/(1<<20), conns, maxConn>>20, daemonBps/(v1Parallel*capBps), v1Parallel)
	if cpuBound {
		note += fmt.Sprintf("; this machine's CPU held the parts to %.0f MB/s in all, under %d x the cap: see the 10 MB/s figure", daemonBps/1e6, v1Parallel)
	}
	o.logf("v1 throughput at %.0f MB/s per connection: splatd %.1f MB/s (%s), curl -T %.1f MB/s", capMB, daemonBps/1e6, took.Round(10*time.Millisecond), curlBps/1e6)
	return []Figure{
		{Name: "v1_put_throughput" + suffix, Value: round(daemonBps/1e6, 1), Unit: "MB/s", Target: fmt.Sprintf("<= %.0f", v1Parallel*capMB),
			Met: met(daemonBps <= v1Parallel*capBps*1.02), Note: "storage's first body byte read to its last part stored, stamped by the simulator as they happen"},
		{Name: "v1_put_throughput_check" + suffix, Value: round(agree, 3), Unit: "ratio", Target: "0.9 to 1.1", Met: met(agree >= 0.9 && agree <= 1.1),
			Note: fmt.Sprintf("the daemon's own splatd_upload_bytes_total, scraped every 20 ms on the bench's clock from its first byte to the last: %.1f MB/s, over the figure above", clientBps/1e6)},
		{Name: "v1_curl_throughput" + suffix, Value: round(curlBps/1e6, 1), Unit: "MB/s", Note: "curl -T of the same file under the same cap"},
		{Name: "v1_throughput_ratio_to_curl" + suffix, Value: round(ratio, 3), Unit: "ratio", Target: ">= 3.2", Met: met(ratio >= 3.2), Note: note},
	}, cpuBound, nil
}

// sampleSent scrapes d's splatd_upload_bytes_total every 20 ms until it
// reaches size and sends the time from the first scrape that saw a byte to
// the first that saw them all (0 if it never did): a clock independent of
// the simulator's.
func sampleSent(ctx context.Context, d *Daemon, size int64) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var first time.Time
		end := time.Now().Add(10 * time.Minute)
		for time.Now().Before(end) && ctx.Err() == nil {
			m, err := d.Metrics()
			now := time.Now()
			if err == nil && m["splatd_upload_bytes_total"] > 0 {
				if first.IsZero() {
					first = now
				}
				if m["splatd_upload_bytes_total"] >= float64(size) {
					out <- now.Sub(first)
					return
				}
			}
			select {
			case <-d.Done():
				out <- 0
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		out <- 0
	}()
	return out
}

// v1RSSFigures publishes a 256 MiB and a 2 GiB sparse file (64 MiB parts,
// 4 in flight; a fresh daemon per file, Reps times each) and reads the
// daemon's VmHWM once the job is done.
func v1RSSFigures(ctx context.Context, o BenchOptions) ([]Figure, error) {
	sim, err := apisim.New(apisim.Options{DiscardObjects: true, ProcessingDelay: 100 * time.Millisecond, Dir: filepath.Join(o.Dir, "v1-rss-sim"),
		PartSize: v1PartSize, Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000}})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	sizes := []struct {
		name string
		size int64
	}{{"256MiB", 256 << 20}, {"2GiB", 2 << 30}}
	rss := map[string][]float64{}
	for _, sz := range sizes {
		for rep := range o.Reps {
			r, err := newV1Run(o, sim, fmt.Sprintf("v1-rss-%s-%d", sz.name, rep), sz.size)
			if err != nil {
				return nil, err
			}
			err = waitReceipt(ctx, r.d, r.file, 10*time.Minute)
			var hwm int64
			if err == nil {
				hwm, err = r.d.VmHWM()
			}
			r.close()
			if err != nil {
				return nil, fmt.Errorf("v1 rss %s: %w", sz.name, err)
			}
			o.logf("v1 rss %s rep %d: VmHWM %.1f MiB", sz.name, rep+1, float64(hwm)/(1<<20))
			rss[sz.name] = append(rss[sz.name], float64(hwm)/(1<<20))
		}
	}
	if st := sim.Stats(); st.V1Splats != len(sizes)*o.Reps {
		return nil, errors.New("v1 rss: not every file was published through v1")
	}
	var figs []Figure
	for _, sz := range sizes {
		m := median(rss[sz.name])
		figs = append(figs, Figure{Name: "v1_peak_rss_" + sz.name, Value: round(m, 1), Unit: "MiB", Target: "<= 64", Met: met(m <= 64),
			Note: fmt.Sprintf("median of %d; max %.1f; %d MiB parts, %d in flight", len(rss[sz.name]), slices.Max(rss[sz.name]), v1PartSize>>20, v1Parallel)})
	}
	diff := median(rss["2GiB"]) - median(rss["256MiB"])
	figs = append(figs, Figure{Name: "v1_peak_rss_2GiB_minus_256MiB", Value: round(diff, 1), Unit: "MiB", Target: "<= 8", Met: met(diff <= 8),
		Note: "the peak does not grow with the file"})
	return figs, nil
}

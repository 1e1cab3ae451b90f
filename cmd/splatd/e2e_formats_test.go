package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
)

// writeSOGFolderE2E writes an unbundled SOG of n splats into dir
// (splatfile.SampleSOGFolder), meta.json first and the images after it
// (between runs in between), as a slow copy would.
func writeSOGFolderE2E(t *testing.T, dir string, n int, between func()) {
	t.Helper()
	files, err := splatfile.SampleSOGFolder(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), files["meta.json"], 0o644); err != nil {
		t.Fatal(err)
	}
	between()
	for name, data := range files {
		if name != "meta.json" {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// bundleSHA256 is the sha256 of the bundle splatd builds from a folder.
func bundleSHA256(t *testing.T, dir string) string {
	t.Helper()
	sum, _ := bundleOf(t, dir)
	return sum
}

// bundleOf is the sha256 and size of the bundle splatd builds from a folder.
func bundleOf(t *testing.T, dir string) (string, int64) {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, sum, err := splatfile.HashSOGFolderIn(t.Context(), r, filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	return sum, f.Size
}

// TestE2EFormatsV1: under v1, an .spz and an unbundled SOG folder dropped
// into the watch folder are each published once, with sourceFormat spz and
// sog; the folder's bundle (what the server stored) is the deterministic
// one, and a copy of the folder is a duplicate, not a second splat.
func TestE2EFormatsV1(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{PartSize: 64 << 10})
	e := newE2EEnv(t, sim, e2eConfig{protocol: "v1"})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()

	spz := filepath.Join(e.inbox, "scan.spz")
	writeFileWith(t, spz, func(w io.Writer) error { return splatfile.WriteSPZ(w, 3000, 4, 3) })
	room := filepath.Join(e.inbox, "room")
	meta := filepath.Join(room, "meta.json")
	// meta.json alone first: the folder waits for the images it names.
	writeSOGFolderE2E(t, room, 2000, func() {
		waitFor(t, "the folder's job waiting for its images", func() bool {
			jobs, _ := adminJobs(t, e.stateDir)
			for _, j := range jobs {
				if j.File == meta && strings.Contains(j.Error, "waiting for") {
					return true
				}
			}
			return false
		})
	})
	rs := waitReceipt(t, spz, "done")
	rf := waitReceipt(t, meta, "done")
	if rs.SHA256 != fileSHA256(t, spz) {
		t.Errorf("spz receipt sha256 %s, want the file's", rs.SHA256)
	}
	want := bundleSHA256(t, room)
	if rf.SHA256 != want {
		t.Errorf("folder receipt sha256 %s, want its bundle's %s", rf.SHA256, want)
	}

	// A copy of the folder elsewhere in the tree: the same bundle, so a
	// duplicate of the published splat.
	cp := filepath.Join(e.inbox, "copies", "room2")
	writeSOGFolderE2E(t, cp, 2000, func() {})
	rc := waitReceipt(t, filepath.Join(cp, "meta.json"), "duplicate")
	if rc.SHA256 != want {
		t.Errorf("copy's sha256 %s, want %s", rc.SHA256, want)
	}

	formats := map[string]int{}
	for _, sp := range sim.Splats() {
		formats[sp.Format]++
		if sp.Format == "sog" && sp.Title != "room" {
			t.Errorf("the folder's splat is titled %q, want its folder's name", sp.Title)
		}
		if sp.Protocol != "v1" {
			t.Errorf("splat %s published through %s", sp.ID, sp.Protocol)
		}
	}
	if len(sim.Splats()) != 2 || formats["spz"] != 1 || formats["sog"] != 1 {
		t.Errorf("splats by sourceFormat: %v, want one spz and one sog", formats)
	}
	if got := sim.PublishesByHash(); len(got) > 0 && got[want] != 1 {
		t.Errorf("the server has %d splats of the folder's bundle (%v), want 1", got[want], got)
	}
	// The bundles were built in state_dir and removed once their jobs
	// finished.
	waitFor(t, "the finished jobs' bundles removed from state_dir/sog-bundles", func() bool {
		left, err := os.ReadDir(filepath.Join(e.stateDir, "sog-bundles"))
		return err == nil && len(left) == 0
	})
	for _, name := range []string{"room.sog", "meta.sog"} {
		if _, err := os.Stat(filepath.Join(e.inbox, name)); err == nil {
			t.Errorf("a bundle %s was written into the watch folder", name)
		}
	}
	if st := sim.Stats(); st.UnknownFields != 0 || st.Uploads != 0 {
		t.Errorf("simulator: %d unknown fields, %d legacy uploads", st.UnknownFields, st.Uploads)
	}
}

// TestE2ESPZLegacy: the legacy API takes .ply and .sog only: an .spz fails
// its job with that reason and is never uploaded.
func TestE2ESPZLegacy(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	spz := filepath.Join(e.inbox, "scan.spz")
	writeFileWith(t, spz, func(w io.Writer) error { return splatfile.WriteSPZ(w, 500, 3, 0) })
	r := waitReceipt(t, spz, "failed")
	if !strings.Contains(r.Message, "legacy API takes .ply and .sog files") {
		t.Errorf("receipt message %q does not give the reason", r.Message)
	}
	if st := sim.Stats(); st.Uploads != 0 || len(sim.Splats()) != 0 {
		t.Errorf("simulator: %d uploads, %d splats; want none", st.Uploads, len(sim.Splats()))
	}
}

// TestE2ESOGFolderIsTheWatchFolder: an unbundled SOG folder that is itself
// the watch folder is published as FOLDER.sog inside it: its title and
// sidecar come from the folder (FOLDER/FOLDER.splat.yaml), and the sidecar
// a FOLDER.sog beside it would have, outside the watch folder, is never
// read.
func TestE2ESOGFolderIsTheWatchFolder(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{PartSize: 64 << 10})
	e := newE2EEnv(t, sim, e2eConfig{protocol: "v1"})
	name := filepath.Base(e.inbox)
	outside := filepath.Join(filepath.Dir(e.inbox), name+".splat.yaml")
	if err := os.WriteFile(outside, []byte("title: read from outside the watch folder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.inbox, name+".splat.yaml"), []byte("description: the folder's own sidecar\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	writeSOGFolderE2E(t, e.inbox, 2000, func() {})
	meta := filepath.Join(e.inbox, "meta.json")
	r := waitReceipt(t, meta, "done")
	if want := bundleSHA256(t, e.inbox); r.SHA256 != want {
		t.Errorf("receipt sha256 %s, want the folder's bundle's %s", r.SHA256, want)
	}
	sps := sim.Splats()
	if len(sps) != 1 {
		t.Fatalf("%d splats on the server, want 1", len(sps))
	}
	if sps[0].Title != name || sps[0].Description != "the folder's own sidecar" {
		t.Errorf("splat titled %q, described %q; want the folder's name %q and its own sidecar's description", sps[0].Title, sps[0].Description, name)
	}
}

// publishedRoom starts a daemon on the simulator's legacy API and has it
// publish an unbundled SOG folder, inbox/room; it returns the folder's
// meta.json and receipt.
func publishedRoom(t *testing.T) (*apisim.Server, *e2eEnv, *e2eDaemon, string, e2eReceipt) {
	t.Helper()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	meta := filepath.Join(e.inbox, "room", "meta.json")
	writeSOGFolderE2E(t, filepath.Dir(meta), 2000, func() {})
	return sim, e, d, meta, waitReceipt(t, meta, "done")
}

// TestE2ESOGFolderAdoptedAfterStateLoss: a published SOG folder's receipt
// is evidence of its bundle, so a daemon whose state directory was lost
// adopts the folder instead of publishing it again (under the legacy API,
// where nothing on the server would stop a second splat).
func TestE2ESOGFolderAdoptedAfterStateLoss(t *testing.T) {
	t.Parallel()
	sim, e, d, meta, r := publishedRoom(t)
	if code := d.stop(); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	if err := os.RemoveAll(e.stateDir); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	waitFor(t, "the folder's job done again", func() bool {
		jobs, _ := adminJobs(t, e.stateDir)
		return len(jobs) == 1 && jobs[0].File == meta && jobs[0].Stage == "done"
	})
	if n := len(sim.Splats()); n != 1 {
		t.Errorf("%d splats on the server, want 1: the folder was published again after the state was lost", n)
	}
	jobs, _ := adminJobs(t, e.stateDir)
	if jobs[0].SHA256 != r.SHA256 {
		t.Errorf("adopted job sha256 %s, want the receipt's (the bundle's) %s", jobs[0].SHA256, r.SHA256)
	}
}

// TestE2ESOGFolderMoved: with on_success: move, a published SOG folder
// moves whole (meta.json, its images, its receipt) to success_dir, and no
// image is left in the watch folder.
func TestE2ESOGFolderMoved(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	done := filepath.Join(t.TempDir(), "published")
	e := newE2EEnv(t, sim, e2eConfig{extra: "after: {on_success: move, success_dir: " + done + "}\n"})
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	room := filepath.Join(e.inbox, "room")
	writeSOGFolderE2E(t, room, 2000, func() {})
	want := bundleSHA256(t, room)
	r := waitReceipt(t, filepath.Join(done, "room", "meta.json"), "done")
	if r.SHA256 != want {
		t.Errorf("receipt sha256 %s, want the bundle's %s", r.SHA256, want)
	}
	// The receipt is written before the files move; meta.json moves last,
	// then the emptied folder goes.
	waitFor(t, "the folder moved", func() bool {
		_, err := os.Stat(filepath.Join(done, "room", "meta.json"))
		_, gone := os.Stat(room)
		return err == nil && os.IsNotExist(gone)
	})
	if got := bundleSHA256(t, filepath.Join(done, "room")); got != want {
		t.Errorf("the moved folder bundles to %s, want %s: not all of it moved", got, want)
	}
	if _, err := os.Stat(room); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(room)
		t.Errorf("the folder is still in the watch folder (%v), holding %d entries", err, len(entries))
	}
}

// TestE2ESOGFolderKnownAfterRestart: a published SOG folder is known to the
// state after a restart, as a file is: no second job (adopted from its own
// receipt), and no warning that the folder holds receipts the state did not
// know.
func TestE2ESOGFolderKnownAfterRestart(t *testing.T) {
	t.Parallel()
	_, e, d, meta, _ := publishedRoom(t)
	if code := d.stop(); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	d = startDaemon(t, e.cfgPath)
	d.waitStarted()
	// A file written after the restart is published once the startup scan
	// has handed over everything before it.
	after := filepath.Join(e.inbox, "after.ply")
	writePLY(t, after, 1500)
	waitReceipt(t, after, "done")
	jobs, _ := adminJobs(t, e.stateDir)
	n := 0
	for _, j := range jobs {
		if j.File == meta {
			n++
			if j.Adopted {
				t.Errorf("job %d: the folder adopted from its own receipt after a restart", j.ID)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d jobs for the folder after a restart, want 1: %+v", n, jobs)
	}
	if strings.Contains(d.log(), "did not know") {
		t.Errorf("the restart warned of receipts the state did not know:\n%s", d.log())
	}
	if code := d.stop(); code != 0 {
		t.Errorf("daemon exit %d", code)
	}
}

// TestE2EPublishKnowsAPublishedSOGFolder: `splatd publish` weighs an
// unbundled SOG folder by its bundle's sha256, as the daemon records it, so
// a folder the daemon published is not published again, whether it is named
// by its meta.json or by the folder itself; -force publishes it, given as
// a folder.
func TestE2EPublishKnowsAPublishedSOGFolder(t *testing.T) {
	t.Parallel()
	sim, e, d, meta, r := publishedRoom(t)
	room := filepath.Dir(meta)
	for _, arg := range []string{meta, room} {
		code, out, errOut := runCLI(t, nil, "publish", "-config", e.cfgPath, arg)
		if code != 0 || !strings.Contains(errOut, "already published") || !strings.Contains(out, r.Splat.URL) {
			t.Errorf("publish %s: exit %d, stdout %q, stderr %q; want already published as %s", arg, code, out, errOut, r.Splat.URL)
		}
	}
	if n := len(sim.Splats()); n != 1 {
		t.Fatalf("%d splats after publish without -force, want 1", n)
	}
	code, out, errOut := runCLI(t, nil, "publish", "-force", "-config", e.cfgPath, room)
	if code != 0 || strings.Contains(errOut, "already published") {
		t.Errorf("publish -force %s: exit %d, stdout %q, stderr %q", room, code, out, errOut)
	}
	if n := len(sim.Splats()); n != 2 {
		t.Errorf("%d splats after publish -force of the folder, want 2", n)
	}
	if code := d.stop(); code != 0 {
		t.Errorf("daemon exit %d", code)
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/splatfile"
)

// TestDryRun: `run -dry-run` predicts a run from the state and the
// receipts: a file the state published is known, a file with a receipt
// saying done is adopted, content the state published or another file
// here has is a duplicate, a broken file fails, a folder's publish block
// and its .splat.yaml give the title; it prints one line per file with
// human sizes and a summary, exits 0 by itself, calls no API (the base
// URL does not resolve) and writes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	stateDir := filepath.Join(dir, "state")
	writePLY(t, filepath.Join(inbox, "scan.ply"), 1000)
	writePLY(t, filepath.Join(inbox, "copy.ply"), 1000)
	writePLY(t, filepath.Join(inbox, "client", "hall.ply"), 1500)
	if err := os.WriteFile(filepath.Join(inbox, "client", ".splat.yaml"), []byte("title: \"Hall {{.Stem}}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inbox, "broken.ply"), []byte("not a splat at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePLY(t, filepath.Join(inbox, ".hidden.ply"), 900) // excluded by name: listed as skipped
	if err := os.WriteFile(filepath.Join(inbox, ".garden.sog.part"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inbox, "notes.txt"), []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Published before by this state directory, and a copy of it.
	old := filepath.Join(inbox, "old.ply")
	writePLY(t, old, 1200)
	writePLY(t, filepath.Join(inbox, "old-copy.ply"), 1200)
	// Published by another state directory: its receipt says so.
	receipted := filepath.Join(inbox, "receipted.ply")
	writePLY(t, receipted, 1300)
	const api = "https://api.invalid"
	if err := after.WriteReceipt(after.ReceiptPath(receipted), after.Receipt{
		File: receipted, Size: fileSize(t, receipted), SHA256: fileSHA256(t, receipted), Status: "done",
		Splat: after.ReceiptSplat{ID: "77", URL: "https://viewer.example/view?id=r77"}, Protocol: "legacy", API: api,
	}); err != nil {
		t.Fatal(err)
	}
	st, err := queue.Open(stateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(old)
	if _, err := st.AdoptBatch(context.Background(), []queue.Adoption{{Path: old, Root: inbox, Size: fi.Size(), ModTime: fi.ModTime(),
		SHA256: fileSHA256(t, old), SplatID: "5", URL: "https://viewer.example/view?id=h5"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	cfgPath := filepath.Join(dir, "config.yaml")
	writeConfig(t, cfgPath, fmt.Sprintf("api: {base_url: %s}\nwatch:\n  - path: %s\n    publish: {title: \"T-{{.Stem}}\"}\nsettle: 50ms\nstate_dir: %s\n"+
		"log: {format: json}\nmetrics: {listen: \"\"}\n", api, inbox, stateDir))

	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := dispatch(context.Background(), c, []string{"run", "-dry-run", "-config", cfgPath}); code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	out := stdout.String()
	line := func(file string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, filepath.Join(inbox, file)+" ") {
				return l
			}
		}
		t.Errorf("no line for %s:\n%s", file, out)
		return ""
	}
	want := map[string][]string{
		// Listed in name order: copy.ply comes first and publishes.
		"copy.ply":        {"publish", `title "T-copy"`, "KiB"},
		"scan.ply":        {"duplicate", "same content as " + filepath.Join(inbox, "copy.ply")},
		"client/hall.ply": {"publish", `title "Hall hall"`},
		"broken.ply":      {"fail", "invalid"},
		"old.ply":         {"known", "job 1", "adopted"},
		"old-copy.ply":    {"duplicate", "same content as job 1"},
		"receipted.ply":   {"adopt", "r77"},
		// Left out by the folder's rules, each with its reason.
		".hidden.ply":      {"skip", `excluded by the folder's pattern ".*"`},
		".garden.sog.part": {"skip", `excluded by the folder's pattern ".*"`},
		"notes.txt":        {"skip", "not matched by the folder's include patterns"},
	}
	for f, words := range want {
		l := line(f)
		if !strings.HasPrefix(l, words[0]+" ") {
			t.Errorf("%s: %q, want action %s", f, l, words[0])
		}
		for _, w := range words[1:] {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q lacks %q", f, l, w)
			}
		}
	}
	if strings.Contains(out, ".splat.yaml") || strings.Contains(out, ".splat.json") {
		t.Errorf("splatd's own files are listed:\n%s", out)
	}
	if want := "2 file(s) would be published"; !strings.Contains(out, want) || !strings.Contains(out, "1 adopted from their receipts, 2 duplicate(s), 1 already in the state, 1 invalid") ||
		!strings.Contains(out, "3 skipped by the folder's rules") {
		t.Errorf("summary: want %q and the other counts:\n%s", want, out)
	}
	st, err = queue.Open(stateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if jobs, err := st.List(queue.Filter{}); err != nil || len(jobs) != 1 {
		t.Errorf("the state after the dry run holds %d job(s) (%v), want the 1 it had", len(jobs), err)
	}
}

// TestDryRunFreshState: without a state directory the dry run judges a
// fresh state and makes none.
func TestDryRunFreshState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	stateDir := filepath.Join(dir, "state")
	writePLY(t, filepath.Join(inbox, "scan.ply"), 1000)
	out := dryRun(t, inbox, stateDir, "")
	if !strings.Contains(out, "fresh state") || !strings.Contains(out, "1 file(s) would be published") {
		t.Errorf("stdout:\n%s", out)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the dry run made the state directory: %v", err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestDryRunSOGFolder: an unbundled SOG folder is judged as the daemon's
// check step does: published (its title the folder's name, its sha256 and
// size the bundle's), a copy of it is a duplicate, and a folder whose
// images have not arrived waits. The dry run once called every folder
// invalid: it checked meta.json as a splat file.
func TestDryRunSOGFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	writeSOGFolderE2E(t, filepath.Join(inbox, "room"), 2000, func() {})
	writeSOGFolderE2E(t, filepath.Join(inbox, "room2"), 2000, func() {})
	half := filepath.Join(inbox, "half")
	writeSOGFolderE2E(t, half, 1000, func() {})
	entries, err := os.ReadDir(half)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "meta.json" {
			if err := os.Remove(filepath.Join(half, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := dryRun(t, inbox, filepath.Join(dir, "state"), "v1")
	sum, size := bundleOf(t, filepath.Join(inbox, "room"))
	want := map[string][]string{
		"room":  {"publish", `title "room"`, "sha256 " + sum[:12], state.HumanSize(size) + " "},
		"room2": {"duplicate", "same content as " + filepath.Join(inbox, "room", "meta.json")},
		"half":  {"wait", "incomplete", "waiting for"},
	}
	for folder, words := range want {
		var l string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, filepath.Join(inbox, folder, "meta.json")+" ") {
				l = line
			}
		}
		if !strings.HasPrefix(l, words[0]+" ") {
			t.Errorf("%s: %q, want action %s:\n%s", folder, l, words[0], out)
		}
		for _, w := range words[1:] {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q lacks %q", folder, l, w)
			}
		}
	}
}

// TestDryRunSOGFolderSizeBounds: the dry run holds a folder's bundle to
// its watch entry's size bounds as the check step does, sized from the
// files' stat: a folder of sparse images over max_size fails, unhashed, as
// does a folder whose bundle is under min_size (its meta.json alone was
// skipped by the bounds, which once hid every folder under a min_size); a
// folder within them publishes.
func TestDryRunSOGFolderSizeBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	capped, floored := filepath.Join(dir, "capped"), filepath.Join(dir, "floored")
	if err := splatfile.WriteSparseSOGFolder(filepath.Join(capped, "big"), 100, 16<<20); err != nil {
		t.Fatal(err)
	}
	writeSOGFolderE2E(t, filepath.Join(capped, "room"), 1500, func() {})
	writeSOGFolderE2E(t, filepath.Join(floored, "tiny"), 1000, func() {})
	cfgPath := filepath.Join(dir, "config.yaml")
	writeConfig(t, cfgPath, fmt.Sprintf("api: {base_url: https://api.invalid}\nwatch:\n  - {path: %s, max_size: 1MiB}\n  - {path: %s, min_size: 1MiB}\n"+
		"state_dir: %s\nlog: {format: json}\nmetrics: {listen: \"\"}\n", capped, floored, filepath.Join(dir, "state")))
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := dispatch(context.Background(), c, []string{"run", "-dry-run", "-config", cfgPath}); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, &stderr)
	}
	out := stdout.String()
	want := map[string][]string{
		filepath.Join(capped, "big"):   {"fail", "80.0 MiB", "bundle would be", "above the size bound max_size 1.0 MiB (1048576 bytes)"},
		filepath.Join(capped, "room"):  {"publish", `title "room"`},
		filepath.Join(floored, "tiny"): {"fail", "bundle would be", "below the size bound min_size 1.0 MiB (1048576 bytes)"},
	}
	for folder, words := range want {
		var l string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, filepath.Join(folder, "meta.json")+" ") {
				l = line
			}
		}
		if !strings.HasPrefix(l, words[0]+" ") {
			t.Errorf("%s: %q, want action %s:\n%s", folder, l, words[0], out)
		}
		for _, w := range words[1:] {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q lacks %q", folder, l, w)
			}
		}
	}
}

// dryRun runs `run -dry-run` on a config watching inbox with api.protocol
// protocol ("" for the default) and state_dir stateDir, and returns what it
// printed; it must exit 0.
func dryRun(t *testing.T, inbox, stateDir, protocol string) string {
	t.Helper()
	api := "base_url: https://api.invalid"
	if protocol != "" {
		api += ", protocol: " + protocol
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, cfgPath, fmt.Sprintf("api: {%s}\nwatch:\n  - path: %s\nstate_dir: %s\nlog: {format: json}\nmetrics: {listen: \"\"}\n", api, inbox, stateDir))
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := dispatch(context.Background(), c, []string{"run", "-dry-run", "-config", cfgPath}); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, &stderr)
	}
	return stdout.String()
}

// TestDryRunSPZLegacy: under the legacy API an .spz fails, as the daemon's
// sign step fails it, and under v1 it publishes.
func TestDryRunSPZLegacy(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"legacy", "v1"} {
		dir := t.TempDir()
		inbox := filepath.Join(dir, "inbox")
		if err := os.MkdirAll(inbox, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFileWith(t, filepath.Join(inbox, "scan.spz"), func(w io.Writer) error { return splatfile.WriteSPZ(w, 3000, 4, 3) })
		stdout := dryRun(t, inbox, filepath.Join(dir, "state"), protocol)
		want := map[string]string{"legacy": "the legacy API takes .ply and .sog files, not spz", "v1": `spz, title "scan"`}[protocol]
		if !strings.Contains(stdout, want) {
			t.Errorf("%s: the line of scan.spz lacks %q:\n%s", protocol, want, stdout)
		}
	}
}

// TestDryRunSaysEncode: a PLY whose folder asks publish.encode: sog is
// said to be encoded before upload; a SOG is uploaded as it is.
func TestDryRunSaysEncode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	writePLY(t, filepath.Join(inbox, "scan.ply"), 1000)
	writeFileWith(t, filepath.Join(inbox, "ready.sog"), func(w io.Writer) error { return splatfile.WriteSOG(w, 1000) })
	if err := os.WriteFile(filepath.Join(inbox, ".splat.yaml"), []byte("encode: sog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout := dryRun(t, inbox, filepath.Join(dir, "state"), "v1")
	for _, l := range strings.Split(stdout, "\n") {
		switch {
		case strings.Contains(l, "scan.ply") && !strings.Contains(l, "encoded to SOG before upload"):
			t.Errorf("the PLY's line does not say it is encoded: %q", l)
		case strings.Contains(l, "ready.sog") && strings.Contains(l, "encoded"):
			t.Errorf("the SOG's line says it is encoded: %q", l)
		}
	}
	if !strings.Contains(stdout, "2 file(s) would be published") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/sog"
	"github.com/splatd/splatd/uploader/splatfile"
)

// TestEncodeCommand: `splatd encode -to sog` writes a SOG that splatd's
// own check accepts and that decodes to the PLY's splats; a file it cannot
// encode fails (exit 1) without leaving an output, and an unknown -to is a
// usage error.
func TestEncodeCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "hall.ply"), filepath.Join(dir, "hall.sog")
	var b bytes.Buffer
	if err := sog.WriteScene(&b, 800, 3, 9); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout := runInProcess(t, "encode", "-to", "sog", in, out)
	if code != exitOK || !strings.Contains(stdout, "800 splats, SH bands 3") {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	info, err := splatfile.Check(out)
	if err != nil || info.Kind != splatfile.KindSOG {
		t.Fatalf("splatd's check of the SOG: %+v, %v", info, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	s, err := sog.Decode(f, fi.Size())
	if err != nil || s.N != 800 || s.Bands != 3 {
		t.Fatalf("decoded %+v, %v", s, err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("output mode %v, want 0644", fi.Mode().Perm())
	}

	bad := filepath.Join(dir, "bad.ply")
	if err := os.WriteFile(bad, []byte("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := runInProcess(t, "encode", bad, filepath.Join(dir, "bad.sog")); code != exitFailure {
		t.Errorf("ascii PLY: exit %d, want %d", code, exitFailure)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.sog")); !os.IsNotExist(err) {
		t.Errorf("a failed encode left its output: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if code, _ := runInProcess(t, "encode", "-to", "spz", in, out); code != exitUsage {
		t.Errorf("-to spz: exit %d, want %d", code, exitUsage)
	}
	// -memory below what the scene needs (sog.MinMemory) refuses it.
	small := filepath.Join(dir, "small.sog")
	if code, _ := runInProcess(t, "encode", "-memory", "32MiB", in, small); code != exitFailure {
		t.Errorf("-memory 32MiB: exit %d, want %d", code, exitFailure)
	}
	if _, err := os.Stat(small); !os.IsNotExist(err) {
		t.Errorf("a refused encode left its output: %v", err)
	}
	if code, _ := runInProcess(t, "encode", "-memory", "lots", in, small); code != exitUsage {
		t.Errorf("-memory lots: exit %d, want %d", code, exitUsage)
	}
}

// TestE2EPublishEncodeLegacy: `splatd publish` under the legacy protocol
// with publish.encode sog uploads the SOG encoded from the PLY, signed as
// <stem>.sog, and leaves no temporary file behind (in a TMPDIR of its own:
// the machine's temp folder holds other tests' and processes' encodings).
func TestE2EPublishEncodeLegacy(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{extra: "publish: {encode: sog}\n"})
	p := filepath.Join(e.dir, "hall.ply")
	var b bytes.Buffer
	if err := sog.WriteScene(&b, 600, 3, 4); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if code, _, errOut := runCLI(t, []string{"TMPDIR=" + tmp}, "publish", "-config", e.cfgPath, p); code != 0 {
		t.Fatalf("publish: exit %d, %s", code, errOut)
	}
	want := filepath.Join(t.TempDir(), "want.sog")
	if _, err := sog.TranscodeFile(context.Background(), p, want, sog.Options{}); err != nil {
		t.Fatal(err)
	}
	wb, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(wb)
	sum := hex.EncodeToString(h[:])
	sp := sim.Splats()
	if len(sp) != 1 || sp[0].ObjectSHA256 != sum || !strings.HasSuffix(sp[0].Key, ".sog") {
		t.Fatalf("server's splats %+v, want one of the SOG (sha256 %s)", sp, sum)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "splatd-encode-*")); len(left) != 0 {
		t.Errorf("temporary encodings left: %v", left)
	}
}

// TestE2EEncodeSkippedShown: a PLY whose encoding cannot fit under the
// daemon's memory limit is published as it is, and every view says why:
// the receipt, /api/jobs, the status page and `splatd jobs`.
func TestE2EEncodeSkippedShown(t *testing.T) {
	t.Parallel()
	sim := newE2ESim(t, apisim.Options{})
	e := newE2EEnv(t, sim, e2eConfig{extra: "publish: {encode: sog}\n"})
	d := startDaemon(t, e.cfgPath, "GOMEMLIMIT=49MiB")
	addr := d.waitStarted()
	p := filepath.Join(e.inbox, "hall.ply")
	var b bytes.Buffer
	if err := sog.WriteScene(&b, 600, 3, 4); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	waitReceipt(t, p, "done")
	raw, err := os.ReadFile(p + ".splat.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		EncodeSkipped string `json:"encode_skipped"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.EncodeSkipped == "" {
		t.Fatalf("receipt %s: want encode_skipped (%v)", raw, err)
	}
	if sp := sim.Splats(); len(sp) != 1 || sp[0].ObjectSHA256 != fileSHA256(t, p) {
		t.Errorf("server's splats %+v, want the PLY itself", sp)
	}
	if code, body := httpGet(t, "http://"+addr+"/api/jobs"); code != 200 || !strings.Contains(body, `"encode_skipped":`) {
		t.Errorf("/api/jobs: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+addr+"/"); code != 200 || !strings.Contains(body, "sent unencoded: ") {
		t.Errorf("status page: %d, no \"sent unencoded\" in it", code)
	}
	if out := jobsTable(t, e.cfgPath); !strings.Contains(out, "(sent unencoded: ") {
		t.Errorf("splatd jobs:\n%s", out)
	}
	d.stop()
}

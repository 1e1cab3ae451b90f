package uploader

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/sog"
)

// writeScene writes a 3DGS PLY with SH bands 3 that the SOG encoder takes.
func (e *workerEnv) writeScene(name string, n int) string {
	e.t.Helper()
	var b bytes.Buffer
	if err := sog.WriteScene(&b, n, 3, 42); err != nil {
		e.t.Fatal(err)
	}
	p := filepath.Join(e.files, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestPublishEncodeSOG: with publish.encode sog, under either protocol, the
// server receives the SOG encoded from the PLY (v1 sourceFormat sog), the
// job keeps the source's sha256 and records the upload's, and the encoding
// is removed once the job is final (as is a crash's partial encoding).
func TestPublishEncodeSOG(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"", ProtocolV1} {
		e := newV1Env(t, apisim.Options{})
		src := e.writeScene("hall.ply", 1000)
		e.enqueue(src)
		o := e.v1Options(1)
		o.Protocol = protocol
		editPublish(&o, func(pp *state.PublishParams) { pp.Encode = "sog" })
		o.WorkDir = e.stateDir
		// A partial encoding left by a crash is removed by the next one.
		if err := os.MkdirAll(filepath.Join(o.WorkDir, "encoded"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(filepath.Join(o.WorkDir, "encoded"), ".x.sog.1.tmp"), []byte("PK"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j := e.job(src)
		if j.Stage != state.Done || j.Encoded == nil {
			t.Fatalf("%q: job %s (%s), encoded %+v", protocol, j.Stage, j.FailReason, j.Encoded)
		}
		if j.SHA256 != workerFileSHA(t, src) || j.Encoded.Encoding != "sog" || j.Encoded.Size >= j.Size/2 {
			t.Errorf("%q: job sha256 %s, encoded %+v of a %d-byte source", protocol, j.SHA256, j.Encoded, j.Size)
		}
		// The encoder is deterministic: encoding the source again gives the
		// bytes the server stored.
		again := filepath.Join(t.TempDir(), "again.sog")
		if _, err := sog.TranscodeFile(context.Background(), src, again, sog.Options{}); err != nil {
			t.Fatal(err)
		}
		sp := e.sim.Splats()
		if len(sp) != 1 || sp[0].ObjectSHA256 != j.Encoded.SHA256 || sp[0].Size != j.Encoded.Size || workerFileSHA(t, again) != j.Encoded.SHA256 {
			t.Fatalf("%q: server's splats %+v, want one of the SOG %+v", protocol, sp, j.Encoded)
		}
		if protocol == ProtocolV1 && (sp[0].Format != "sog" || j.V1.Key != "splatd-"+j.SHA256+"-sog-g0-s1") {
			t.Errorf("v1 sourceFormat %q, key %s: want sog and the source's sha256 with the encoding", sp[0].Format, j.V1.Key)
		}
		if left, _ := os.ReadDir(filepath.Join(o.WorkDir, "encoded")); len(left) != 0 {
			t.Errorf("%q: %d files left in the encode dir", protocol, len(left))
		}
	}
}

// TestPublishEncodeOffUploadsOriginal: without publish.encode the PLY itself
// is uploaded and nothing is encoded.
func TestPublishEncodeOffUploadsOriginal(t *testing.T) {
	t.Parallel()
	e := newV1Env(t, apisim.Options{})
	src := e.writeScene("hall.ply", 500)
	e.enqueue(src)
	o := e.v1Options(1)
	o.WorkDir = e.stateDir
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.job(src)
	sp := e.sim.Splats()
	if j.Stage != state.Done || j.Encoded != nil || len(sp) != 1 || sp[0].ObjectSHA256 != j.SHA256 || sp[0].Format != "ply" {
		t.Fatalf("job %s encoded %+v; server %+v", j.Stage, j.Encoded, sp)
	}
	if _, err := os.Stat(filepath.Join(o.WorkDir, "encoded")); !os.IsNotExist(err) {
		t.Errorf("encode dir made without an encoding: %v", err)
	}
}

// TestPublishEncodeTooLargeUploadsOriginal: under a memory limit its
// encoding would not fit (sog.MinMemory), a PLY is published as it is,
// not encoded (an encoding past the limit would get the daemon killed,
// and again at every restart), and the job says why; with room under the
// limit it is encoded.
// Not parallel: it sets the package's memoryLimit.
func TestPublishEncodeTooLargeUploadsOriginal(t *testing.T) {
	const splats = 2000
	defer func(f func() int64) { memoryLimit = f }(memoryLimit)
	for _, tc := range []struct {
		name    string
		limit   int64
		encoded bool
	}{
		{"under the limit", content.EncodeHeadroom + 1<<30, true},
		{"over the limit", content.EncodeHeadroom + 64<<20, false},
	} {
		memoryLimit = func() int64 { return tc.limit }
		e := newV1Env(t, apisim.Options{})
		src := e.writeScene("hall.ply", splats)
		e.enqueue(src)
		o := e.v1Options(1)
		editPublish(&o, func(pp *state.PublishParams) { pp.Encode = "sog" })
		o.WorkDir = e.stateDir
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j := e.job(src)
		sp := e.sim.Splats()
		if j.Stage != state.Done || len(sp) != 1 {
			t.Fatalf("%s: job %s (%s), server %+v", tc.name, j.Stage, j.FailReason, sp)
		}
		if got := j.Encoded != nil; got != tc.encoded || (sp[0].Format == "sog") != tc.encoded {
			t.Errorf("%s: encoded %+v, server got %s; want encoded %v", tc.name, j.Encoded, sp[0].Format, tc.encoded)
		}
		if (j.EncodeSkipped != "") == tc.encoded {
			t.Errorf("%s: the job's encode_skipped is %q", tc.name, j.EncodeSkipped)
		}
		if !tc.encoded && sp[0].ObjectSHA256 != j.SHA256 {
			t.Errorf("%s: server's object %s, want the PLY's %s", tc.name, sp[0].ObjectSHA256, j.SHA256)
		}
	}
}

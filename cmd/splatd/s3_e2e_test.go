package main

// The S3 lane (`make test-s3`): the splatd binary against the simulator
// whose storage is a real S3 server (versitygw), seen through a recording
// proxy, for both protocols. Without SPLATD_TEST_S3 every test here skips,
// so `make test` stays offline and fast. The v1 tests also skip while the
// daemon has no `api.protocol: v1`.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/apisim/s3rec"
	"github.com/splatd/splatd/uploader/splatfile"
)

// s3World is one test's S3 lane: the server's config, the proxy in front
// of it, the simulator using the proxy, and a direct S3 client.
type s3World struct {
	t     *testing.T
	conf  apisim.S3
	proxy *s3rec.Proxy
	sim   *apisim.Server
	s3    *minio.Core
}

func newS3World(t *testing.T, f apisim.Faults) *s3World {
	t.Helper()
	conf := s3rec.Config(t)
	splatdBinary(t) // skips with -short
	p := s3rec.Start(t, conf)
	st := p.S3()
	sim := newE2ESim(t, apisim.Options{S3: &st, Faults: f})
	core, err := minio.NewCore(conf.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(conf.AccessKey, conf.SecretKey, ""), Secure: conf.Secure, Region: apisim.DefaultS3Region,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &s3World{t: t, conf: conf, proxy: p, sim: sim, s3: core}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what S3 answered the signed-URL PUTs:\n%s", w.putSummary())
		}
	})
	return w
}

// armAfterProbe sets the URL faults once the daemon's start-up token
// probe is answered: under legacy that probe asks for a signed URL, which
// would take the first faulty one.
func (w *s3World) armAfterProbe(d *e2eDaemon, f apisim.Faults) {
	w.t.Helper()
	d.waitStarted()
	d.waitLogLine("the API accepts the token")
	w.sim.SetFaults(f)
}

// putSummary counts the presigned PUTs by S3's answer and lists the
// headers they carried, for the log of a failed test.
func (w *s3World) putSummary() string {
	answers := map[string]int{}
	headers := map[string]bool{}
	for _, r := range w.proxy.PresignedPUTs() {
		a := fmt.Sprintf("%d %s %s", r.Status, r.Code, r.Message)
		if r.Err != "" {
			a += " (" + r.Err + ")"
		}
		answers[a]++
		for k := range r.Header {
			headers[k] = true
		}
	}
	var b strings.Builder
	for _, a := range slices.Sorted(maps.Keys(answers)) {
		fmt.Fprintf(&b, "  %4d × %s\n", answers[a], a)
	}
	fmt.Fprintf(&b, "  headers sent: %s", strings.Join(slices.Sorted(maps.Keys(headers)), ", "))
	return b.String()
}

// s3Protocols runs fn once per protocol; v1 skips while the daemon does not
// know `api.protocol`.
func s3Protocols(t *testing.T, fn func(t *testing.T, protocol string)) {
	for _, proto := range []string{"legacy", "v1"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			fn(t, proto)
		})
	}
}

// s3Env writes the daemon's config for protocol, skipping v1 if this
// daemon refuses the key.
func (w *s3World) env(protocol string) *e2eEnv {
	w.t.Helper()
	e := newE2EEnv(w.t, w.sim, e2eConfig{workers: 2})
	if protocol == "legacy" {
		return e
	}
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		w.t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "api:\n", "api:\n  protocol: "+protocol+"\n", 1)
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
	if code, out, errOut := runCLI(w.t, nil, "config", "check", "-config", e.cfgPath); code != 0 {
		if strings.Contains(out+errOut, "protocol") {
			w.t.Skipf("this daemon has no api.protocol %s yet: %s", protocol, strings.TrimSpace(errOut))
		}
		w.t.Fatalf("config check: exit %d\n%s%s", code, out, errOut)
	}
	return e
}

// splatOf finds the simulator's record of a receipt's splat.
func (w *s3World) splatOf(r e2eReceipt) apisim.SplatRecord {
	w.t.Helper()
	for _, s := range w.sim.Splats() {
		if s.Hash == r.Splat.Hash || (r.Splat.ID != "" && s.ID == r.Splat.ID) || (r.Splat.ID != "" && s.Hash == r.Splat.ID) {
			return s
		}
	}
	w.t.Fatalf("the simulator has no splat for receipt %+v", r.Splat)
	return apisim.SplatRecord{}
}

// storedSHA256 reads an object straight from S3.
func (w *s3World) storedSHA256(key string) string {
	w.t.Helper()
	body, _, _, err := w.s3.GetObject(context.Background(), w.conf.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		w.t.Fatalf("GetObject %s: %v", key, err)
	}
	defer body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		w.t.Fatalf("GetObject %s: %v", key, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkPUTHeaders asserts that no PUT with a signed URL carried an
// Authorization or an x-amz-* header (S3 refuses unsigned ones, and the
// URL's signature covers only the host).
func (w *s3World) checkPUTHeaders() {
	w.t.Helper()
	puts := w.proxy.PresignedPUTs()
	if len(puts) == 0 {
		w.t.Fatal("no presigned PUT reached S3")
	}
	for _, r := range puts {
		for k := range r.Header {
			if strings.EqualFold(k, "Authorization") || strings.HasPrefix(strings.ToLower(k), "x-amz-") {
				w.t.Errorf("a PUT to S3 (part %d) carried the header %s", r.PartNumber, k)
			}
		}
		if r.Status != 0 && r.Status != http.StatusOK && r.Code != "AccessDenied" && r.Code != "AuthorizationQueryParametersError" {
			w.t.Errorf("S3 answered a PUT %d %s", r.Status, r.Code)
		}
	}
}

// checkETags asserts that every CompleteMultipartUpload S3 accepted named,
// for each part, the ETag S3 gave that part's last successful PUT, byte
// for byte (quotes included), and returns how many there were.
func (w *s3World) checkETags() int {
	w.t.Helper()
	last := map[string]string{} // uploadId/part → ETag
	n := 0
	for _, r := range w.proxy.Requests() {
		switch {
		case r.Presigned && r.Method == http.MethodPut && r.Status == http.StatusOK && r.PartNumber > 0:
			if !strings.HasPrefix(r.ETag, `"`) || !strings.HasSuffix(r.ETag, `"`) {
				w.t.Errorf("S3 answered part %d with ETag %s: not quoted", r.PartNumber, r.ETag)
			}
			last[fmt.Sprintf("%s/%d", r.UploadID, r.PartNumber)] = r.ETag
		case r.Complete != nil && r.Status == http.StatusOK:
			n++
			for i, p := range r.Complete {
				want := last[fmt.Sprintf("%s/%d", r.UploadID, p.PartNumber)]
				if p.PartNumber != i+1 || p.ETag != want {
					w.t.Errorf("CompleteMultipartUpload part %d: %+v, S3 gave ETag %s", i+1, p, want)
				}
			}
		}
	}
	return n
}

// TestS3EachKindPublished: a plain PLY (several parts under v1), a
// compressed PLY and a SOG are published; S3 holds each file's bytes; the
// PUTs carry no credentials; v1 completes with S3's ETags exactly.
func TestS3EachKindPublished(t *testing.T) {
	t.Parallel()
	s3Protocols(t, func(t *testing.T, proto string) {
		w := newS3World(t, apisim.Faults{})
		e := w.env(proto)
		d := startDaemon(t, e.cfgPath)
		d.waitStarted()

		plain := filepath.Join(e.inbox, "hall.ply")
		compressed := filepath.Join(e.inbox, "hall.compressed.ply")
		sog := filepath.Join(e.inbox, "garden.sog")
		// 50,000 splats of 248 bytes: about 12 MiB, three 5 MiB parts.
		writePLY(t, plain, 50_000)
		writeFileWith(t, compressed, func(w io.Writer) error { return splatfile.WriteCompressedPLY(w, 4000) })
		writeFileWith(t, sog, func(w io.Writer) error { return splatfile.WriteSOG(w, 3000) })

		for _, f := range []string{plain, compressed, sog} {
			r := waitReceipt(t, f, "done", "failed", "duplicate")
			if r.Status != "done" {
				t.Errorf("%s: receipt %q (%s), want done", filepath.Base(f), r.Status, r.Message)
				continue
			}
			sp := w.splatOf(r)
			want := fileSHA256(t, f)
			if sp.S3Key == "" || sp.ObjectSHA256 != want {
				t.Errorf("%s: splat %+v, want the file's sha256 %s", filepath.Base(f), sp, want)
				continue
			}
			if got := w.storedSHA256(sp.S3Key); got != want {
				t.Errorf("%s: S3 holds sha256 %s, the file's is %s", filepath.Base(f), got, want)
			}
		}
		w.checkPUTHeaders()
		if proto == "v1" {
			if n := w.checkETags(); n != 3 {
				t.Errorf("%d CompleteMultipartUpload accepted by S3, want 3", n)
			}
			var parts int
			for _, r := range w.proxy.PresignedPUTs() {
				if r.PartNumber > 0 && r.Status == http.StatusOK {
					parts++
				}
			}
			if parts < 5 { // 3 of hall.ply, 1 each of the others
				t.Errorf("%d part PUTs reached S3, want 5", parts)
			}
		}
		if code := d.stop(); code != 0 {
			t.Errorf("splatd exit code %d, want 0", code)
		}
	})
}

// TestS3ExpiredURLResigned: S3 refuses an expired URL with 403
// AccessDenied (XML); the daemon signs again and the file is published.
func TestS3ExpiredURLResigned(t *testing.T) {
	t.Parallel()
	s3Protocols(t, func(t *testing.T, proto string) {
		// Small files: S3 answers a refusal without reading the body and
		// closes, which a large body can meet as a reset (then the client
		// retries after a backoff, which is slower but also correct).
		w := newS3World(t, apisim.Faults{})
		e := w.env(proto)
		d := startDaemon(t, e.cfgPath)
		w.armAfterProbe(d, apisim.Faults{ExpiredURLs: 1, ExpiredPartURLs: 1})
		f := filepath.Join(e.inbox, "late.ply")
		writePLY(t, f, 20)
		if r := waitReceipt(t, f, "done", "failed", "duplicate"); r.Status != "done" {
			t.Fatalf("receipt %q (%s), want done", r.Status, r.Message)
		}
		var refused, ok int
		for _, r := range w.proxy.PresignedPUTs() {
			switch {
			case r.Status == http.StatusForbidden && r.Code == "AccessDenied":
				refused++
			case r.Status == http.StatusOK:
				ok++
			}
		}
		if refused != 1 || ok != 1 {
			t.Errorf("S3 saw %d PUTs refused AccessDenied and %d accepted, want 1 and 1", refused, ok)
		}
		if got := w.storedSHA256(w.splatOf(mustReceipt(t, f)).S3Key); got != fileSHA256(t, f) {
			t.Errorf("S3 holds sha256 %s, not the file's", got)
		}
		w.checkPUTHeaders()
		if proto == "v1" {
			w.checkETags()
		}
		d.stop()
	})
}

// TestS3RefusalInReason: a URL S3 refuses for good (signed for another
// region: 400 AuthorizationQueryParametersError) fails the job, and the
// reason names S3's error code.
func TestS3RefusalInReason(t *testing.T) {
	t.Parallel()
	s3Protocols(t, func(t *testing.T, proto string) {
		w := newS3World(t, apisim.Faults{})
		e := w.env(proto)
		d := startDaemon(t, e.cfgPath)
		w.armAfterProbe(d, apisim.Faults{WrongRegionURLs: 1})
		f := filepath.Join(e.inbox, "refused.ply")
		writePLY(t, f, 20)
		r := waitReceipt(t, f, "done", "failed", "duplicate")
		if r.Status != "failed" || !strings.Contains(r.Message, "AuthorizationQueryParametersError") {
			t.Errorf("receipt %q %q, want failed with S3's code AuthorizationQueryParametersError", r.Status, r.Message)
		}
		jobs, err := adminJobs(t, e.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.File == f && (j.Stage != "failed" || !strings.Contains(j.Error, "AuthorizationQueryParametersError")) {
				t.Errorf("job %+v: want failed, its error naming AuthorizationQueryParametersError", j)
			}
		}
		var refused int
		for _, r := range w.proxy.PresignedPUTs() {
			if r.Status == http.StatusBadRequest && r.Code == "AuthorizationQueryParametersError" {
				refused++
			}
		}
		if refused != 1 {
			t.Errorf("S3 refused %d PUTs, want 1", refused)
		}
		w.checkPUTHeaders()
		d.stop()
	})
}

// TestS3V1ResumeAfterKill: the daemon is SIGKILLed in the middle of a
// multi-part upload (S3 holds three of eight parts, the next PUTs are held
// at the proxy); after a restart only the parts S3's ListParts lacks are
// sent, each once, and the object is the file.
func TestS3V1ResumeAfterKill(t *testing.T) {
	t.Parallel()
	w := newS3World(t, apisim.Faults{})
	e := w.env("v1")
	big := filepath.Join(e.inbox, "big.ply")
	size := writeBigPLY(t, filepath.Join(e.dir, "staged.ply"), 8*apisim.MinS3PartSize-1000)
	w.proxy.StallAfter(3)
	d := startDaemon(t, e.cfgPath)
	d.waitStarted()
	if err := os.Rename(filepath.Join(e.dir, "staged.ply"), big); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 parts stored and the next held", func() bool {
		return okParts(w.proxy.PresignedPUTs()) == 3 && w.proxy.Stalled() > 0
	})
	d.kill()
	w.proxy.DropStalled() // what the dead daemon was sending never reaches S3

	puts := w.proxy.PresignedPUTs()
	var key, uploadID string
	for _, r := range puts {
		if r.Status == http.StatusOK {
			key, uploadID = strings.TrimPrefix(r.Path, "/"+w.conf.Bucket+"/"), r.UploadID
		}
	}
	held := w.listParts(key, uploadID)
	if len(held) != 3 {
		t.Fatalf("S3 holds parts %v after the kill, want 3", held)
	}
	mark := len(puts)

	d2 := startDaemon(t, e.cfgPath)
	d2.waitStarted()
	r := waitReceipt(t, big, "done", "failed", "duplicate")
	if r.Status != "done" {
		t.Fatalf("receipt %q (%s), want done", r.Status, r.Message)
	}
	var resent []int
	for _, p := range w.proxy.PresignedPUTs()[mark:] {
		if p.Status == http.StatusOK {
			if p.UploadID != uploadID {
				t.Errorf("a part went to S3 upload %s, not the session's %s", p.UploadID, uploadID)
			}
			resent = append(resent, p.PartNumber)
		}
	}
	slices.Sort(resent)
	var missing []int
	parts := int((size + apisim.MinS3PartSize - 1) / apisim.MinS3PartSize) // the header may round the size up
	for n := 1; n <= parts; n++ {
		if !slices.Contains(held, n) {
			missing = append(missing, n)
		}
	}
	if !slices.Equal(resent, missing) {
		t.Errorf("after the restart S3 received parts %v, want exactly the missing %v", resent, missing)
	}
	sp := w.splatOf(r)
	if sp.Size != size || w.storedSHA256(sp.S3Key) != fileSHA256(t, big) {
		t.Errorf("S3's object (%d bytes) is not the file (%d bytes)", sp.Size, size)
	}
	if n := w.checkETags(); n != 1 {
		t.Errorf("%d CompleteMultipartUpload accepted, want 1", n)
	}
	w.checkPUTHeaders()
	d2.stop()
}

func okParts(puts []s3rec.Request) int {
	n := 0
	for _, r := range puts {
		if r.PartNumber > 0 && r.Status == http.StatusOK {
			n++
		}
	}
	return n
}

// listParts asks S3 which parts of an upload it holds.
func (w *s3World) listParts(key, uploadID string) []int {
	w.t.Helper()
	res, err := w.s3.ListObjectParts(context.Background(), w.conf.Bucket, key, uploadID, 0, 1000)
	if err != nil {
		w.t.Fatalf("ListParts: %v", err)
	}
	var out []int
	for _, p := range res.ObjectParts {
		out = append(out, p.PartNumber)
	}
	return out
}

func mustReceipt(t *testing.T, f string) e2eReceipt {
	t.Helper()
	r, ok := readReceipt(t, f)
	if !ok {
		t.Fatalf("no receipt for %s", f)
	}
	return r
}

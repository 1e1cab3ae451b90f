package apisim_test

// The S3 storage backend against a real S3 server (the S3 lane, `make
// test-s3`): presigned PUTs and UploadParts sent from here with a plain
// http.Client, as any client would. Without SPLATD_TEST_S3 the tests that
// need a server skip; the option checks run everywhere.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/apisim/s3rec"
)

func TestParseS3URL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want apisim.S3
		err  string
	}{
		{in: "s3://k:s@127.0.0.1:9000/b", want: apisim.S3{Endpoint: "127.0.0.1:9000", AccessKey: "k", SecretKey: "s", Bucket: "b"}},
		{in: "s3+https://AK%2F1:S%40x@s3.example:443/splats?region=eu-west-1", want: apisim.S3{Endpoint: "s3.example:443", AccessKey: "AK/1", SecretKey: "S@x", Bucket: "splats", Region: "eu-west-1", Secure: true}},
		{in: "http://k:s@h:1/b", err: "scheme"},
		{in: "s3://h:1/b", err: "no access key"},
		{in: "s3://k@h:1/b", err: "no secret key"},
		{in: "s3://k:s@h/b", err: "HOST:PORT"},
		{in: "s3://k:s@h:1/", err: "one bucket"},
		{in: "s3://k:s@h:1/b/c", err: "one bucket"},
	} {
		got, err := apisim.ParseS3URL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseS3URL(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseS3URL(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if strings.Contains(got.String(), got.SecretKey) {
			t.Errorf("S3.String() shows the secret: %s", got)
		}
	}
}

func TestS3OptionsChecked(t *testing.T) {
	t.Parallel()
	s3 := &apisim.S3{Endpoint: "127.0.0.1:1", AccessKey: "k", SecretKey: "s", Bucket: "b"}
	for _, o := range []apisim.Options{
		{S3: s3, PartSize: 1 << 20},
		{S3: s3, PartStore: fakeStore{}},
	} {
		if s, err := apisim.New(o); err == nil {
			s.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

type fakeStore struct{ apisim.PartStore }

// s3Lane is one test's world: the S3 server behind a recording proxy, the
// simulator using it, and a direct S3 client to read what was stored.
type s3Lane struct {
	t     *testing.T
	proxy *s3rec.Proxy
	sim   *apisim.Server
	http  *http.Client // to the simulator (its CA)
	s3    *minio.Core  // straight to the S3 server
	conf  apisim.S3
}

func newS3Lane(t *testing.T, o apisim.Options) *s3Lane {
	t.Helper()
	conf := s3rec.Config(t)
	p := s3rec.Start(t, conf)
	st := p.S3()
	o.S3 = &st
	o.Logger = zerolog.Nop()
	if o.ProcessingDelay == 0 {
		o.ProcessingDelay = -1
	}
	sim, err := apisim.New(o)
	if err != nil {
		t.Fatalf("apisim.New: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	core, err := minio.NewCore(conf.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(conf.AccessKey, conf.SecretKey, ""), Secure: conf.Secure, Region: apisim.DefaultS3Region,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &s3Lane{t: t, proxy: p, sim: sim, http: sim.Client(), s3: core, conf: conf}
}

// api sends a JSON request to the simulator with the token and decodes
// the answer into out (if not nil); it returns the status.
func (l *s3Lane) api(method, path string, body, out any) int {
	l.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, l.sim.URL()+path, rd)
	req.Header.Set("Authorization", "Bearer "+l.sim.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.http.Do(req)
	if err != nil {
		l.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			l.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// put sends body to a presigned URL as a client must: Content-Length, no
// Authorization, no x-amz-* header. It returns status, ETag and body.
func put(t *testing.T, url string, body []byte) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), string(b)
}

// stored reads an object straight from S3 and returns its sha256.
func (l *s3Lane) stored(key string) string {
	l.t.Helper()
	body, _, _, err := l.s3.GetObject(context.Background(), l.conf.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		l.t.Fatalf("GetObject %s: %v", key, err)
	}
	defer body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		l.t.Fatalf("GetObject %s: %v", key, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkClientPUTs asserts what storage saw of the client's PUTs: no
// Authorization and no x-amz-* header (S3 refuses unsigned ones).
func (l *s3Lane) checkClientPUTs() {
	l.t.Helper()
	puts := l.proxy.PresignedPUTs()
	if len(puts) == 0 {
		l.t.Fatal("no presigned PUT reached storage")
	}
	for _, r := range puts {
		for k := range r.Header {
			if strings.EqualFold(k, "Authorization") || strings.HasPrefix(strings.ToLower(k), "x-amz-") {
				l.t.Errorf("PUT %s carried header %s", r.Path, k)
			}
		}
	}
}

func sampleBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	copy(b, "ply\n")
	for i := 4; i < n; i++ {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestS3LegacyPresignedPut(t *testing.T) {
	t.Parallel()
	l := newS3Lane(t, apisim.Options{Faults: apisim.Faults{ExpiredURLs: 1}})
	data := sampleBytes(300<<10, 1)

	// The first URL is handed out expired: S3 refuses it, a new one works.
	var su struct{ SignedURL, StorageKey string }
	if code := l.api("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"}, &su); code != 200 {
		t.Fatalf("signed-url: %d", code)
	}
	// A small body: S3 answers a refusal before reading the body and
	// closes, which a large body can meet as a reset instead.
	code, _, body := put(t, su.SignedURL, data[:1000])
	if code != http.StatusForbidden || !strings.Contains(body, "<Code>AccessDenied</Code>") {
		t.Fatalf("PUT on an expired URL: %d %s; want 403 AccessDenied", code, body)
	}
	if code := l.api("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"}, &su); code != 200 {
		t.Fatalf("signed-url: %d", code)
	}
	code, etag, body := put(t, su.SignedURL, data)
	if code != http.StatusOK || !strings.HasPrefix(etag, `"`) {
		t.Fatalf("PUT: %d ETag %q %s", code, etag, body)
	}

	var sp struct{ ID string }
	if code := l.api("POST", "/api/splats/publish", map[string]any{"storageKey": su.StorageKey, "title": "a", "format": "sog"}, &sp); code != 201 {
		t.Fatalf("publish: %d", code)
	}
	rec, ok := l.sim.Splat(sp.ID)
	if !ok || rec.ObjectSHA256 != sha(data) || rec.Size != int64(len(data)) {
		t.Fatalf("splat %+v: want sha256 %s size %d (read back from S3)", rec, sha(data), len(data))
	}
	if got := l.stored(rec.S3Key); got != sha(data) {
		t.Errorf("S3 holds sha256 %s, want %s", got, sha(data))
	}
	l.checkClientPUTs()
}

// session creates a v1 session of size bytes and returns its id and part
// size.
func (l *s3Lane) session(size int) (string, int) {
	l.t.Helper()
	var s struct {
		ID       string
		PartSize int
	}
	if code := l.api("POST", "/api/supersplat/v1/splats/uploads", map[string]any{"sourceFormat": "ply", "contentLength": size}, &s); code != 201 {
		l.t.Fatalf("create: %d", code)
	}
	return s.ID, s.PartSize
}

type partURL struct {
	PartNumber int
	URL        string
}

func (l *s3Lane) partURLs(id string, nums ...int) map[int]string {
	l.t.Helper()
	var r struct{ URLs []partURL }
	if code := l.api("POST", "/api/supersplat/v1/splats/uploads/"+id+"/part-upload-urls", map[string]any{"parts": nums}, &r); code != 200 {
		l.t.Fatalf("part-upload-urls: %d", code)
	}
	out := map[int]string{}
	for _, u := range r.URLs {
		out[u.PartNumber] = u.URL
	}
	return out
}

type uploadedPart struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
	Size       int64  `json:"size"`
}

func TestS3MultipartSession(t *testing.T) {
	t.Parallel()
	l := newS3Lane(t, apisim.Options{Faults: apisim.Faults{ExpiredPartURLs: 1}})
	data := sampleBytes(2*apisim.MinS3PartSize+1000, 2) // a small last part for the expired URL
	id, ps := l.session(len(data))
	if ps < apisim.MinS3PartSize {
		t.Fatalf("partSize %d: below S3's minimum", ps)
	}
	part := func(n int) []byte { return data[(n-1)*ps : min(n*ps, len(data))] }

	// Part 3's first URL is handed out expired.
	urls := l.partURLs(id, 3)
	if code, _, body := put(t, urls[3], part(3)); code != http.StatusForbidden || !strings.Contains(body, "<Code>AccessDenied</Code>") {
		t.Fatalf("PUT on an expired part URL: %d %s; want 403 AccessDenied", code, body)
	}

	// Parts in parallel and out of order.
	urls = l.partURLs(id, 3, 1, 2)
	etags := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n, u := range urls {
		wg.Go(func() {
			code, etag, body := put(t, u, part(n))
			if code != http.StatusOK {
				t.Errorf("part %d: %d %s", n, code, body)
			}
			mu.Lock()
			etags[n] = etag
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// uploadedParts are S3's ListParts, ETags exactly as the PUTs got them.
	var sess struct {
		Status        string
		UploadedParts []uploadedPart
	}
	l.api("GET", "/api/supersplat/v1/splats/uploads/"+id, nil, &sess)
	if len(sess.UploadedParts) != 3 || sess.Status != "uploading" {
		t.Fatalf("session %+v: want 3 parts, uploading", sess)
	}
	// The strict simulator gives a part no size (the schema makes it
	// optional; SessionPartSizes is the generous variant).
	for _, p := range sess.UploadedParts {
		if p.ETag != etags[p.PartNumber] || p.Size != 0 {
			t.Errorf("uploadedParts %+v: the PUT answered ETag %s (quotes included) for %d bytes; want that ETag and no size", p, etags[p.PartNumber], len(part(p.PartNumber)))
		}
	}

	// A wrong ETag is refused before S3 is asked; then the right ones.
	bad := []map[string]any{{"partNumber": 1, "etag": strings.Trim(etags[1], `"`)}, {"partNumber": 2, "etag": etags[2]}, {"partNumber": 3, "etag": etags[3]}}
	if code := l.api("POST", "/api/supersplat/v1/splats/uploads/"+id+"/complete", map[string]any{"parts": bad}, nil); code != 400 {
		t.Errorf("complete with an unquoted ETag: %d, want 400", code)
	}
	var parts []map[string]any
	for n := 1; n <= 3; n++ {
		parts = append(parts, map[string]any{"partNumber": n, "etag": etags[n]})
	}
	var comp struct{ SplatID string }
	if code := l.api("POST", "/api/supersplat/v1/splats/uploads/"+id+"/complete", map[string]any{"parts": parts}, &comp); code != 201 {
		t.Fatalf("complete: %d", code)
	}
	rec, ok := l.sim.Splat(func() string {
		for _, s := range l.sim.Splats() {
			if s.Hash == comp.SplatID {
				return s.ID
			}
		}
		return ""
	}())
	if !ok || rec.ObjectSHA256 != sha(data) || rec.Size != int64(len(data)) {
		t.Fatalf("splat %+v: want sha256 %s, %d bytes", rec, sha(data), len(data))
	}
	if got := l.stored(rec.S3Key); got != sha(data) {
		t.Errorf("S3 holds sha256 %s, want %s", got, sha(data))
	}

	// S3 got CompleteMultipartUpload with the PUTs' ETags, byte for byte.
	var completes [][]s3rec.CompletedPart
	for _, r := range l.proxy.Requests() {
		if r.Complete != nil && r.Status == 200 {
			completes = append(completes, r.Complete)
		}
	}
	if len(completes) != 1 {
		t.Fatalf("%d successful CompleteMultipartUpload, want 1", len(completes))
	}
	for i, p := range completes[0] {
		if p.PartNumber != i+1 || p.ETag != etags[i+1] {
			t.Errorf("CompleteMultipartUpload part %d: %+v, want ETag %s", i+1, p, etags[i+1])
		}
	}
	// The expired URL reached S3 and was refused there.
	var refused int
	for _, r := range l.proxy.PresignedPUTs() {
		if r.Status == 403 && r.Code == "AccessDenied" {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d PUTs refused AccessDenied by S3, want 1", refused)
	}
	l.checkClientPUTs()

	// A repeat complete is the simulator's replay; S3 is not asked again.
	if code := l.api("POST", "/api/supersplat/v1/splats/uploads/"+id+"/complete", map[string]any{"parts": parts}, nil); code != 200 {
		t.Errorf("repeat complete: %d, want 200", code)
	}
}

func TestS3WrongRegionRefused(t *testing.T) {
	t.Parallel()
	l := newS3Lane(t, apisim.Options{Faults: apisim.Faults{WrongRegionURLs: 2}})
	var su struct{ SignedURL string }
	l.api("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"}, &su)
	if code, _, body := put(t, su.SignedURL, sampleBytes(1000, 4)); code != 400 || !strings.Contains(body, "<Code>AuthorizationQueryParametersError</Code>") {
		t.Errorf("legacy PUT signed for the wrong region: %d %s", code, body)
	}
	id, _ := l.session(1000)
	urls := l.partURLs(id, 1)
	if code, _, body := put(t, urls[1], sampleBytes(1000, 4)); code != 400 || !strings.Contains(body, "<Code>AuthorizationQueryParametersError</Code>") {
		t.Errorf("part PUT signed for the wrong region: %d %s", code, body)
	}
}

func TestS3SessionAbort(t *testing.T) {
	t.Parallel()
	l := newS3Lane(t, apisim.Options{})
	data := sampleBytes(1000, 3)
	id, _ := l.session(len(data))
	urls := l.partURLs(id, 1)
	if code, _, body := put(t, urls[1], data); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if !l.sim.CancelUpload(id) {
		t.Fatal("CancelUpload: no such session")
	}
	// S3 forgot the upload: a PUT on the old URL is refused there.
	code, _, body := put(t, urls[1], data)
	if code != http.StatusNotFound || !strings.Contains(body, "NoSuchUpload") {
		t.Errorf("PUT after abort: %d %s; want 404 NoSuchUpload", code, body)
	}
}

package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
)

// syncBuffer is a log sink goroutines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// --- the contract's request schemas, closed, as an independent server
// would check them. Pointers tell an absent field from a zero one. --------

type schemaUploadClient struct {
	ID      *string `json:"id"`
	Version *string `json:"version"`
}

type schemaCreate struct {
	SourceFormat  *string             `json:"sourceFormat"`
	ContentLength *int64              `json:"contentLength"`
	Title         *string             `json:"title"`
	Description   *string             `json:"description"`
	UploadClient  *schemaUploadClient `json:"uploadClient"`
	SoftwareTools []string            `json:"softwareTools"`
}

type schemaPartNumbers struct {
	Parts []int `json:"parts"`
}

type schemaCompletedPart struct {
	PartNumber *int    `json:"partNumber"`
	ETag       *string `json:"etag"`
}

type schemaComplete struct {
	Parts []schemaCompletedPart `json:"parts"`
}

var schemaToolID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// strictDecode decodes a request body into v, refusing unknown fields and
// trailing data, as a closed schema does.
func strictDecode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("Content-Type %q", ct)
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// checkCreate applies the create schema's limits.
func checkCreate(b schemaCreate) error {
	switch {
	case b.SourceFormat == nil || !slices.Contains([]string{"ply", "sog", "ssog", "lcc", "spz"}, *b.SourceFormat):
		return errors.New("sourceFormat missing or not in the enum")
	case b.ContentLength != nil && (*b.ContentLength < 0 || *b.ContentLength > 25000000000):
		return errors.New("contentLength out of range")
	case b.Title != nil && (utf8.RuneCountInString(*b.Title) < 1 || utf8.RuneCountInString(*b.Title) > 100 || !utf8.ValidString(*b.Title)):
		return fmt.Errorf("title of %d characters", utf8.RuneCountInString(*b.Title))
	case b.Description != nil && utf8.RuneCountInString(*b.Description) > 5000:
		return errors.New("description too long")
	case b.UploadClient == nil || b.UploadClient.ID == nil || !schemaToolID.MatchString(*b.UploadClient.ID):
		return errors.New("uploadClient.id missing or malformed")
	case b.UploadClient.Version != nil && (len(*b.UploadClient.Version) < 1 || utf8.RuneCountInString(*b.UploadClient.Version) > 64):
		return errors.New("uploadClient.version out of range")
	case len(b.SoftwareTools) > 6:
		return errors.New("too many softwareTools")
	}
	for i, t := range b.SoftwareTools {
		if !schemaToolID.MatchString(t) || slices.Contains(b.SoftwareTools[:i], t) {
			return fmt.Errorf("softwareTools item %q", t)
		}
	}
	return nil
}

func checkPartNumbers(b schemaPartNumbers) error {
	if len(b.Parts) < 1 || len(b.Parts) > 100 {
		return fmt.Errorf("%d parts", len(b.Parts))
	}
	for _, n := range b.Parts {
		if n < 1 || n > 10000 {
			return fmt.Errorf("part %d", n)
		}
	}
	return nil
}

func checkComplete(b schemaComplete) error {
	if len(b.Parts) < 1 || len(b.Parts) > 10000 {
		return fmt.Errorf("%d parts", len(b.Parts))
	}
	for i, p := range b.Parts {
		if p.PartNumber == nil || p.ETag == nil || *p.PartNumber < 1 || *p.PartNumber > 10000 || *p.ETag == "" {
			return fmt.Errorf("part item %d incomplete", i)
		}
		if i > 0 && *p.PartNumber <= *b.Parts[i-1].PartNumber {
			return errors.New("parts not in ascending order")
		}
	}
	return nil
}

// v1Recorder is a v1 server that checks every request as a strict server
// would (bearer, closed bodies) and answers from canned bodies.
type v1Recorder struct {
	t    *testing.T
	mu   sync.Mutex
	seen v1Seen
}

// v1Seen is what the server received, in order.
type v1Seen struct {
	paths     []string // method and request URI
	keys      []string // Idempotency-Key of each create
	creates   []schemaCreate
	partCalls []schemaPartNumbers
	completes []schemaComplete
	rawBodies []string
}

// snapshot copies what the server has seen so far.
func (v *v1Recorder) snapshot() v1Seen {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v1Seen{
		paths: slices.Clone(v.seen.paths), keys: slices.Clone(v.seen.keys), creates: slices.Clone(v.seen.creates),
		partCalls: slices.Clone(v.seen.partCalls), completes: slices.Clone(v.seen.completes), rawBodies: slices.Clone(v.seen.rawBodies),
	}
}

// snapshot copies the observed requests.
func (o *testObserver) snapshot() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.requests)
}

func (v *v1Recorder) record(r *http.Request, body any) bool {
	v.t.Helper()
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		v.t.Errorf("%s %s: Authorization = %q", r.Method, r.URL.Path, got)
	}
	v.mu.Lock()
	v.seen.paths = append(v.seen.paths, r.Method+" "+r.URL.RequestURI())
	v.mu.Unlock()
	if body == nil {
		return true
	}
	raw, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	v.mu.Lock()
	v.seen.rawBodies = append(v.seen.rawBodies, string(raw))
	v.mu.Unlock()
	err := strictDecode(r, body)
	if err == nil {
		switch b := body.(type) {
		case *schemaCreate:
			err = checkCreate(*b)
		case *schemaPartNumbers:
			err = checkPartNumbers(*b)
		case *schemaComplete:
			err = checkComplete(*b)
		}
	}
	if err != nil {
		v.t.Errorf("%s %s: body %s refused by the closed schema: %v", r.Method, r.URL.Path, raw, err)
		return false
	}
	return true
}

func (v *v1Recorder) handler() http.Handler {
	mux := http.NewServeMux()
	const p = "/api/supersplat/v1"
	mux.HandleFunc("GET "+p+"/me", func(w http.ResponseWriter, r *http.Request) {
		v.record(r, nil)
		writeJSON(w, 200, `{"id":12345,"username":null,"plan":"free"}`)
	})
	mux.HandleFunc("GET "+p+"/splats", func(w http.ResponseWriter, r *http.Request) {
		v.record(r, nil)
		writeJSON(w, 200, `{"data":[
			{"id":"AbCd1234","title":"Scan","description":"","status":"processing","visibility":"unlisted",
			 "format":null,"size":0,"viewerUrl":"https://superspl.at/scene/AbCd1234",
			 "createdAt":"2025-06-01T10:00:00Z","updatedAt":"2025-06-01T10:00:01Z","completedAt":null,"owner":{"id":1}},
			{"id":87654321,"title":"Old","status":"completed","visibility":"listed","format":"sog","size":"2048",
			 "viewerUrl":"https://superspl.at/scene/87654321","createdAt":"2025-05-01T10:00:00Z",
			 "updatedAt":"2025-05-01T11:00:00Z","completedAt":"2025-05-01T11:00:00Z"}],
			"pagination":{"skip":4,"limit":2,"total":"7"},"links":{}}`)
	})
	mux.HandleFunc("GET "+p+"/splats/{id}", func(w http.ResponseWriter, r *http.Request) {
		v.record(r, nil)
		writeJSON(w, 200, `{"id":"`+r.PathValue("id")+`","status":"archived","visibility":"secret","format":null,"completedAt":null}`)
	})
	mux.HandleFunc("POST "+p+"/splats/uploads", func(w http.ResponseWriter, r *http.Request) {
		var b schemaCreate
		if !v.record(r, &b) {
			writeJSON(w, 400, `{"error":"Invalid request"}`)
			return
		}
		v.mu.Lock()
		v.seen.creates = append(v.seen.creates, b)
		key := r.Header.Get("Idempotency-Key")
		seen := slices.Contains(v.seen.keys, key)
		v.seen.keys = append(v.seen.keys, key)
		v.mu.Unlock()
		status := 201
		if seen {
			status = 200
		}
		writeJSON(w, status, `{"id":"up-1","status":"created","contentLength":300,"partSize":100,
			"uploadedParts":[],"expiresAt":"2025-06-02T10:00:00Z","createdAt":"2025-06-01T10:00:00Z"}`)
	})
	mux.HandleFunc("GET "+p+"/splats/uploads/{id}", func(w http.ResponseWriter, r *http.Request) {
		v.record(r, nil)
		if r.PathValue("id") != "up-1" {
			writeJSON(w, 404, `{"error":"Resource not found"}`)
			return
		}
		writeJSON(w, 200, `{"id":"up-1","status":"uploading","contentLength":300,"partSize":100,
			"uploadedParts":[{"partNumber":1,"etag":"\"e1\"","size":100},{"partNumber":"2","etag":"\"e2\""}],
			"expiresAt":"2025-06-02T10:00:00Z"}`)
	})
	mux.HandleFunc("POST "+p+"/splats/uploads/{id}/part-upload-urls", func(w http.ResponseWriter, r *http.Request) {
		var b schemaPartNumbers
		if !v.record(r, &b) {
			writeJSON(w, 400, `{"error":"Invalid request"}`)
			return
		}
		v.mu.Lock()
		v.seen.partCalls = append(v.seen.partCalls, b)
		v.mu.Unlock()
		var urls []string
		for i := len(b.Parts) - 1; i >= 0; i-- { // reversed: the client must not rely on the order
			n := b.Parts[i]
			urls = append(urls, fmt.Sprintf(`{"partNumber":%d,"url":"https://storage.example/b/k?partNumber=%d&X-Amz-Signature=sig%d","expiresAt":"2025-06-01T11:00:00Z","method":"PUT"}`, n, n, n))
		}
		writeJSON(w, 200, `{"uploadId":"`+r.PathValue("id")+`","partSize":100,"urls":[`+strings.Join(urls, ",")+`]}`)
	})
	mux.HandleFunc("POST "+p+"/splats/uploads/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		var b schemaComplete
		if !v.record(r, &b) {
			writeJSON(w, 400, `{"error":"Invalid request"}`)
			return
		}
		v.mu.Lock()
		v.seen.completes = append(v.seen.completes, b)
		status := 201
		if len(v.seen.completes) > 1 {
			status = 200
		}
		v.mu.Unlock()
		w.Header().Set("Location", "/api/supersplat/v1/splats/AbCd1234")
		writeJSON(w, status, `{"uploadId":"`+r.PathValue("id")+`","status":"completed","splatId":"AbCd1234","editUrl":"https://superspl.at/editor?id=AbCd1234"}`)
	})
	return mux
}

func newV1Server(t *testing.T) (*Client, *v1Recorder, *testObserver) {
	t.Helper()
	rec := &v1Recorder{t: t}
	c, _, obs := newTestServer(t, rec.handler())
	return c, rec, obs
}

func TestV1Me(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	me, err := c.Me(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if me != (Me{ID: "12345"}) {
		t.Errorf("Me = %+v", me)
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if seen.paths[0] != "GET /api/supersplat/v1/me" || requests[0] != "v1_me 200" {
		t.Errorf("path %v, observed %v", seen.paths, requests)
	}
}

func TestV1ListSplatsTolerant(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	ctx := context.Background()
	list, err := c.ListSplats(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if list.Pagination != (Pagination{Skip: 4, Limit: 2, Total: 7}) || len(list.Data) != 2 {
		t.Fatalf("list = %+v", list)
	}
	a, b := list.Data[0], list.Data[1]
	if a.ID != "AbCd1234" || a.Status != SplatProcessing || a.Visibility != VisibilityUnlisted || a.Format != "" ||
		a.CompletedAt != nil || a.Size != 0 || a.ViewerURL != "https://superspl.at/scene/AbCd1234" || a.UpdatedAt.IsZero() {
		t.Errorf("processing splat = %+v", a)
	}
	if b.ID != "87654321" || b.Status != SplatCompleted || !b.Status.Known() || b.Format != "sog" || b.Size != 2048 ||
		b.CompletedAt == nil || !b.CompletedAt.Equal(time.Date(2025, 5, 1, 11, 0, 0, 0, time.UTC)) {
		t.Errorf("completed splat = %+v", b)
	}
	if _, err := c.ListSplats(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if want := []string{"GET /api/supersplat/v1/splats?limit=2&skip=4", "GET /api/supersplat/v1/splats"}; !slices.Equal(seen.paths, want) {
		t.Errorf("requests %v, want %v", seen.paths, want)
	}
	if requests[0] != "v1_splats 200" {
		t.Errorf("observed %v", requests)
	}
}

func TestV1ListSplatsItemNotAnObject(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"data":[{"id":"a"},"b"],"pagination":{"skip":0,"limit":50,"total":2}}`)
	}))
	_, err := c.ListSplats(context.Background(), 0, 0)
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Route != RouteV1Splats {
		t.Fatalf("err = %v, want a ProtocolError", err)
	}
}

func TestV1SplatKeepsUnknownStatus(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	s, err := c.SplatV1(context.Background(), "Zx9/y")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "Zx9/y" || s.Status != "archived" || s.Status.Known() || s.Visibility != "secret" || s.CompletedAt != nil {
		t.Errorf("splat = %+v", s)
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if seen.paths[0] != "GET /api/supersplat/v1/splats/Zx9%2Fy" || requests[0] != "v1_get_splat 200" {
		t.Errorf("path %v, observed %v", seen.paths, requests)
	}
}

func TestV1CreateUploadCreatedThenExisting(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	ctx := context.Background()
	req := CreateUploadRequest{SourceFormat: SourceFormatPLY, ContentLength: 300, Title: "Garden", Description: "a scan"}
	const key = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08:g1"

	s, created, err := c.CreateUpload(ctx, key, req)
	if err != nil || !created {
		t.Fatalf("first create: created %v, err %v", created, err)
	}
	if s.ID != "up-1" || s.Status != UploadCreated || s.PartSize != 100 || s.ContentLength != 300 ||
		len(s.UploadedParts) != 0 || !s.ExpiresAt.Equal(time.Date(2025, 6, 2, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("session = %+v", s)
	}
	s2, created, err := c.CreateUpload(ctx, key, req)
	if err != nil || created || s2.ID != s.ID {
		t.Fatalf("repeat create: %+v, created %v, err %v", s2, created, err)
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if !slices.Equal(seen.keys, []string{key, key}) {
		t.Errorf("Idempotency-Key headers %q", seen.keys)
	}
	b := seen.creates[0]
	if *b.SourceFormat != "ply" || *b.ContentLength != 300 || *b.Title != "Garden" || *b.Description != "a scan" ||
		*b.UploadClient.ID != "splatd" || *b.UploadClient.Version != "dev" || b.SoftwareTools != nil {
		t.Errorf("create body %s", seen.rawBodies[0])
	}
	if want := []string{"v1_create_upload 201", "v1_create_upload 200"}; !slices.Equal(requests, want) {
		t.Errorf("observed %v, want %v", requests, want)
	}
}

// TestV1RequestBodiesAreClosed sends every request body the client can
// produce, at and past the contract's limits, to a server that decodes them
// with DisallowUnknownFields and checks the limits (v1Recorder.record).
func TestV1RequestBodiesAreClosed(t *testing.T) {
	t.Parallel()
	c, rec, _ := newV1Server(t)
	ctx := context.Background()

	longTitle := "  " + strings.Repeat("é", 99) + "日本" + "tail"        // 2 leading spaces, 105 runes after them
	emojiTitle := strings.Repeat("a", 99) + "😀😀"                       // the cut falls after the first emoji, never inside it
	longDesc := strings.Repeat("ß", MaxDescriptionLen-1) + "\u00e9xyz" // 5003 runes
	full := CreateUploadRequest{
		SourceFormat: SourceFormatSOG, ContentLength: MaxContentLength, Title: longTitle, Description: longDesc,
		SoftwareTools: []string{"polycam", "postshot-2"},
	}
	minimal := CreateUploadRequest{SourceFormat: SourceFormatLCC, Title: "   "}
	for i, r := range []CreateUploadRequest{full, minimal, {SourceFormat: SourceFormatSSOG, Title: emojiTitle}, {SourceFormat: SourceFormatSPZ}} {
		if _, _, err := c.CreateUpload(ctx, "key-"+strconv.Itoa(i), r); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if _, err := c.PartURLs(ctx, "up-1", []int{1, 10000, 3}); err != nil {
		t.Fatal(err)
	}
	hundred := make([]int, MaxPartURLsPerCall)
	for i := range hundred {
		hundred[i] = i + 1
	}
	if _, err := c.PartURLs(ctx, "up-1", hundred); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CompleteUpload(ctx, "up-1", []CompletedPart{{3, `"c"`}, {1, `"a"`}, {2, `"b"`}}); err != nil {
		t.Fatal(err)
	}

	seen := rec.snapshot()
	if n := len(seen.creates); n != 4 {
		t.Fatalf("%d creates reached the server", n)
	}
	if got := *seen.creates[0].Title; got != strings.Repeat("é", 99)+"日" {
		t.Errorf("title cut to %q", got)
	}
	if got := *seen.creates[0].Description; utf8.RuneCountInString(got) != MaxDescriptionLen || !strings.HasSuffix(got, "ßé") {
		t.Errorf("description cut to %d runes, ends %q", utf8.RuneCountInString(got), got[len(got)-8:])
	}
	if got := *seen.creates[2].Title; got != strings.Repeat("a", 99)+"😀" || !utf8.ValidString(got) {
		t.Errorf("emoji title cut to %q", got)
	}
	// Optional fields absent, not empty: the minimal body is exactly these keys.
	var keys map[string]json.RawMessage
	json.Unmarshal([]byte(seen.rawBodies[1]), &keys)
	if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, []string{"sourceFormat", "uploadClient"}) {
		t.Errorf("minimal create body %s has keys %v", seen.rawBodies[1], got)
	}
	if !slices.Equal(seen.partCalls[0].Parts, []int{1, 10000, 3}) {
		t.Errorf("part numbers sent %v", seen.partCalls[0].Parts)
	}
	got := seen.completes[0].Parts
	if len(got) != 3 || *got[0].PartNumber != 1 || *got[0].ETag != `"a"` || *got[2].PartNumber != 3 || *got[2].ETag != `"c"` {
		t.Errorf("complete body %s", seen.rawBodies[len(seen.rawBodies)-1])
	}
}

func TestV1ClientVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ opt, ua, want string }{
		{"1.4.0", "splatd/0.9", "1.4.0"},
		{"", "splatd/0.9.1 (linux)", "0.9.1"},
		{"", "splatd-test", "dev"},
		{"", "", "dev"},
		{strings.Repeat("v", 80), "", strings.Repeat("v", 64)},
	} {
		if got := clientVersion(tc.opt, tc.ua); got != tc.want {
			t.Errorf("clientVersion(%q, %q) = %q, want %q", tc.opt, tc.ua, got, tc.want)
		}
	}
	rec := &v1Recorder{t: t}
	srv := httptest.NewTLSServer(rec.handler())
	t.Cleanup(srv.Close)
	c, err := NewClient(ClientOptions{BaseURL: srv.URL, Token: testToken, RootCAs: testRoots(), UserAgent: "splatd/2.0.1", ClientVersion: "2.0.1+dirty"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateUpload(context.Background(), "k", CreateUploadRequest{SourceFormat: SourceFormatPLY}); err != nil {
		t.Fatal(err)
	}
	seen := rec.snapshot()
	if v := *seen.creates[0].UploadClient.Version; v != "2.0.1+dirty" {
		t.Errorf("uploadClient.version = %q", v)
	}
}

// TestV1RequestsRefusedBeforeSending: what the API would answer 400 to never
// leaves the machine, and state classifies it as permanent.
func TestV1RequestsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	var hits int
	var mu sync.Mutex
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		writeJSON(w, 500, `{"error":"should not be reached"}`)
	}))
	ctx := context.Background()
	ok := CreateUploadRequest{SourceFormat: SourceFormatPLY}
	with := func(f func(*CreateUploadRequest)) CreateUploadRequest { r := ok; f(&r); return r }
	create := func(key string, r CreateUploadRequest) func() error {
		return func() error { _, _, err := c.CreateUpload(ctx, key, r); return err }
	}
	parts := func(id string, p []int) func() error {
		return func() error { _, err := c.PartURLs(ctx, id, p); return err }
	}
	complete := func(id string, p []CompletedPart) func() error {
		return func() error { _, _, err := c.CompleteUpload(ctx, id, p); return err }
	}
	cases := map[string]func() error{
		"empty key":           create("", ok),
		"key of 201":          create(strings.Repeat("k", 201), ok),
		"key with space":      create("a b", ok),
		"key with non-ASCII":  create("clé", ok),
		"key with newline":    create("a\nb", ok),
		"no sourceFormat":     create("k", CreateUploadRequest{}),
		"unknown format":      create("k", with(func(r *CreateUploadRequest) { r.SourceFormat = "obj" })),
		"format wrong case":   create("k", with(func(r *CreateUploadRequest) { r.SourceFormat = "PLY" })),
		"negative length":     create("k", with(func(r *CreateUploadRequest) { r.ContentLength = -1 })),
		"oversize length":     create("k", with(func(r *CreateUploadRequest) { r.ContentLength = MaxContentLength + 1 })),
		"7 tools":             create("k", with(func(r *CreateUploadRequest) { r.SoftwareTools = strings.Fields("a b c d e f g") })),
		"tool pattern":        create("k", with(func(r *CreateUploadRequest) { r.SoftwareTools = []string{"Polycam"} })),
		"tool repeated":       create("k", with(func(r *CreateUploadRequest) { r.SoftwareTools = []string{"a", "a"} })),
		"no part numbers":     parts("up", nil),
		"101 part numbers":    parts("up", make([]int, 101)),
		"part 0":              parts("up", []int{0}),
		"part 10001":          parts("up", []int{10001}),
		"empty upload id":     parts("", []int{1}),
		"upload id of 201":    parts(strings.Repeat("u", 201), []int{1}),
		"complete nothing":    complete("up", nil),
		"complete part twice": complete("up", []CompletedPart{{1, `"a"`}, {2, `"b"`}, {1, `"a"`}}),
		"complete no etag":    complete("up", []CompletedPart{{1, ""}}),
		"complete part 0":     complete("up", []CompletedPart{{0, `"a"`}}),
		"get upload no id":    func() error { _, err := c.GetUpload(ctx, " "); return err },
		"splat id of 101":     func() error { _, err := c.SplatV1(ctx, strings.Repeat("s", 101)); return err },
		"list limit 129":      func() error { _, err := c.ListSplats(ctx, 129, 0); return err },
		"list limit -1":       func() error { _, err := c.ListSplats(ctx, -1, 0); return err },
		"list skip 100001":    func() error { _, err := c.ListSplats(ctx, 10, 100001); return err },
	}
	for name, call := range cases {
		err := call()
		var re *RequestError
		if !errors.As(err, &re) {
			t.Errorf("%s: err = %v, want *RequestError", name, err)
			continue
		}
		if !strings.HasPrefix(re.Route, "v1_") || (&state.Policy{}).Decide(context.Background(), err, 1, time.Now()).Action != state.Fail {
			t.Errorf("%s: route %q, decision %v", name, re.Route, (&state.Policy{}).Decide(context.Background(), err, 1, time.Now()).Action)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Errorf("%d refused requests reached the server", hits)
	}
}

func TestV1CreateAnswerWithoutIDOrPartSize(t *testing.T) {
	t.Parallel()
	for body, reason := range map[string]string{
		`{"status":"created","partSize":100}`: "no session id",
		`{"id":"u","status":"created"}`:       "no positive partSize",
	} {
		c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 201, body) }))
		_, created, err := c.CreateUpload(context.Background(), "k", CreateUploadRequest{SourceFormat: SourceFormatPLY})
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Route != RouteV1CreateUpload || !strings.Contains(pe.Reason, reason) || !created {
			t.Errorf("%s: created %v, err %v", body, created, err)
		}
	}
}

func TestV1GetUploadTolerant(t *testing.T) {
	t.Parallel()
	body := `{"id":98765,"status":"processing","contentLength":"250","partSize":100.0,"splatId":"AbCd1234",
		"expiresAt":null,"extra":[1,2],
		"uploadedParts":[
			{"partNumber":1,"etag":"\"e1\"","size":100,"lastModified":"x"},
			{"partNumber":"2","etag":"\"e2\""},
			{"partNumber":3,"etag":"e3-unquoted","size":null},
			{"partNumber":0,"etag":"\"zero\""},
			{"partNumber":4},
			"garbage",
			{"partNumber":10001,"etag":"\"big\""}]}`
	c, _, obs := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/supersplat/v1/splats/uploads/98765" {
			writeJSON(w, 404, `{"error":"Resource not found"}`)
			return
		}
		writeJSON(w, 200, body)
	}))
	ctx := context.Background()
	s, err := c.GetUpload(ctx, "98765")
	if err != nil {
		t.Fatal(err)
	}
	want := []UploadedPart{
		{PartNumber: 1, ETag: `"e1"`, Size: 100, HasSize: true},
		{PartNumber: 2, ETag: `"e2"`},
		{PartNumber: 3, ETag: "e3-unquoted"},
	}
	if s.ID != "98765" || s.Status != UploadProcessing || s.ContentLength != 250 || s.PartSize != 100 ||
		s.SplatID != "AbCd1234" || !s.ExpiresAt.IsZero() || !slices.Equal(s.UploadedParts, want) {
		t.Errorf("session = %+v", s)
	}

	// uploadedParts that is not an array means no part is known: all are sent again.
	var w wireUploadSession
	if err := json.Unmarshal([]byte(`{"id":"u","status":"paused","uploadedParts":{"1":"x"}}`), &w); err != nil {
		t.Fatal(err)
	}
	if s := w.session(); s.Status != "paused" || s.Status.Known() || s.UploadedParts != nil {
		t.Errorf("odd session = %+v", s)
	}

	_, err = c.GetUpload(ctx, "gone")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Route != RouteV1GetUpload || ae.Message != "Resource not found" {
		t.Errorf("gone session: err = %v", err)
	}
	if requests := obs.snapshot(); !slices.Equal(requests, []string{"v1_get_upload 200", "v1_get_upload 404"}) {
		t.Errorf("observed %v", requests)
	}
}

func TestV1PartURLs(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	got, err := c.PartURLs(context.Background(), "up-1", []int{5, 2, 9})
	if err != nil {
		t.Fatal(err)
	}
	if got.UploadID != "up-1" || got.PartSize != 100 || len(got.URLs) != 3 {
		t.Fatalf("PartURLs = %v", got)
	}
	for i, n := range []int{5, 2, 9} {
		u := got.URLs[i]
		if u.PartNumber != n || u.URL != fmt.Sprintf("https://storage.example/b/k?partNumber=%d&X-Amz-Signature=sig%d", n, n) ||
			!u.ExpiresAt.Equal(time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC)) {
			t.Errorf("URLs[%d] = %+v", i, u)
		}
	}
	if s := fmt.Sprintf("%v %+v", got.URLs[0], got); strings.Contains(s, "Signature") || strings.Contains(s, "sig5") {
		t.Errorf("formatting a PartURL shows its query: %s", s)
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if seen.paths[0] != "POST /api/supersplat/v1/splats/uploads/up-1/part-upload-urls" || requests[0] != "v1_part_urls 200" {
		t.Errorf("path %v, observed %v", seen.paths, requests)
	}
}

func TestV1PartURLsUnusableAnswers(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"part missing":   `{"uploadId":"up","partSize":5,"urls":[{"partNumber":1,"url":"https://s/k?sig=1"}]}`,
		"item garbage":   `{"uploadId":"up","partSize":5,"urls":[{"partNumber":1,"url":"https://s/k?sig=1"},"https://s/k2"]}`,
		"relative url":   `{"uploadId":"up","partSize":5,"urls":[{"partNumber":1,"url":"https://s/k?sig=1"},{"partNumber":2,"url":"/k?sig=2"}]}`,
		"other session":  `{"uploadId":"other","partSize":5,"urls":[{"partNumber":1,"url":"https://s/k?sig=1"},{"partNumber":2,"url":"https://s/k?sig=2"}]}`,
		"urls an object": `{"uploadId":"up","partSize":5,"urls":{"1":"https://s/k?sig=1"}}`,
	} {
		c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, body) }))
		_, err := c.PartURLs(context.Background(), "up", []int{1, 2})
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Route != RouteV1PartURLs {
			t.Errorf("%s: err = %v, want a ProtocolError", name, err)
		}
	}
}

func TestV1CompleteCreatedThenReplayed(t *testing.T) {
	t.Parallel()
	c, rec, obs := newV1Server(t)
	ctx := context.Background()
	parts := []CompletedPart{{2, `"b"`}, {1, `"a"`}}
	comp, replayed, err := c.CompleteUpload(ctx, "up-1", parts)
	if err != nil || replayed {
		t.Fatalf("complete: replayed %v, err %v", replayed, err)
	}
	want := Completion{UploadID: "up-1", Status: UploadCompleted, SplatID: "AbCd1234",
		EditURL: "https://superspl.at/editor?id=AbCd1234", Location: "/api/supersplat/v1/splats/AbCd1234"}
	if comp != want {
		t.Errorf("completion = %+v, want %+v", comp, want)
	}
	comp, replayed, err = c.CompleteUpload(ctx, "up-1", parts)
	if err != nil || !replayed || comp != want {
		t.Fatalf("repeat: %+v, replayed %v, err %v", comp, replayed, err)
	}
	if parts[0].PartNumber != 2 {
		t.Error("CompleteUpload reordered the caller's slice")
	}
	seen, requests := rec.snapshot(), obs.snapshot()
	if len(seen.completes) != 2 || requests[0] != "v1_complete 201" || requests[1] != "v1_complete 200" {
		t.Errorf("completes %d, observed %v", len(seen.completes), requests)
	}
}

func TestV1CompleteWithoutSplatID(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, `{"uploadId":"up","status":"completed","editUrl":"https://e"}`)
	}))
	comp, replayed, err := c.CompleteUpload(context.Background(), "up", []CompletedPart{{1, `"a"`}})
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Route != RouteV1Complete || replayed || comp.EditURL != "https://e" {
		t.Errorf("completion %+v, replayed %v, err %v", comp, replayed, err)
	}
}

// TestV1ErrorMapping: every non-2xx is an *APIError with the route, the
// status and the server's `error` text; 409 and 413 are told apart by
// Status; 429 carries Retry-After and Reset.
func TestV1ErrorMapping(t *testing.T) {
	t.Parallel()
	reset := time.Now().Add(40 * time.Second).Truncate(time.Second).UTC()
	ops := map[string]func(*Client) error{
		RouteV1Me:       func(c *Client) error { _, err := c.Me(context.Background()); return err },
		RouteV1Splats:   func(c *Client) error { _, err := c.ListSplats(context.Background(), 10, 0); return err },
		RouteV1GetSplat: func(c *Client) error { _, err := c.SplatV1(context.Background(), "s"); return err },
		RouteV1CreateUpload: func(c *Client) error {
			_, _, err := c.CreateUpload(context.Background(), "k", CreateUploadRequest{SourceFormat: SourceFormatPLY})
			return err
		},
		RouteV1GetUpload: func(c *Client) error { _, err := c.GetUpload(context.Background(), "u"); return err },
		RouteV1PartURLs:  func(c *Client) error { _, err := c.PartURLs(context.Background(), "u", []int{1}); return err },
		RouteV1Complete: func(c *Client) error {
			_, _, err := c.CompleteUpload(context.Background(), "u", []CompletedPart{{1, `"e"`}})
			return err
		},
	}
	statuses := []struct {
		status int
		msg    string
	}{
		{400, "Invalid request"}, {401, "Unauthorized"}, {403, "Forbidden"}, {404, "Resource not found"},
		{409, "Invalid upload state"}, {413, "Upload size limit exceeded"}, {429, "Too many requests"}, {502, "Bad Gateway"},
	}
	for route, op := range ops {
		for _, st := range statuses {
			t.Run(route+"/"+strconv.Itoa(st.status), func(t *testing.T) {
				t.Parallel()
				// A fresh client each time: a 429 holds the route in the pacer.
				c, _, obs := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if st.status == 429 {
						w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
						w.Header().Set("Retry-After", "30")
					}
					if st.status == 502 {
						w.Header().Set("Content-Type", "text/html")
						w.WriteHeader(502)
						return
					}
					writeJSON(w, st.status, `{"error":"`+st.msg+`"}`)
				}))
				err := op(c)
				var ae *APIError
				if !errors.As(err, &ae) {
					t.Fatalf("err = %v, want *APIError", err)
				}
				if ae.Route != route || ae.Status != st.status || ae.Message != st.msg || ae.FromStorage() {
					t.Errorf("APIError = %+v", ae)
				}
				if want := fmt.Sprintf("%s: HTTP %d: %s", route, st.status, st.msg); err.Error() != want {
					t.Errorf("Error() = %q, want %q", err, want)
				}
				if st.status == 429 && (ae.RetryAfter != 30*time.Second || !ae.Reset.Equal(reset)) {
					t.Errorf("429: RetryAfter %v, Reset %v", ae.RetryAfter, ae.Reset)
				}
				if requests := obs.snapshot(); len(requests) != 1 || requests[0] != route+" "+strconv.Itoa(st.status) {
					t.Errorf("observed %v", requests)
				}
			})
		}
	}
}

// rateObserver records the client's RateLimit calls.
type rateObserver struct {
	NopObserver
	mu    sync.Mutex
	rates []string
}

func (o *rateObserver) RateLimit(class string, remaining int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rates = append(o.rates, class+"="+strconv.Itoa(remaining))
}

// TestV1RoutesArePaced: the v1 routes go through the shared pacer, which
// reads their X-RateLimit-* headers and, after a 429 with Retry-After, holds
// the next call instead of sending it.
func TestV1RoutesArePaced(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/me") {
			w.Header().Set("X-RateLimit-Limit", "120")
			w.Header().Set("X-RateLimit-Remaining", "117")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10))
			writeJSON(w, 200, `{"id":"u1","username":"ann"}`)
			return
		}
		w.Header().Set("Retry-After", "30")
		writeJSON(w, 429, `{"error":"Too many requests"}`)
	}))
	t.Cleanup(srv.Close)

	waits := make(chan time.Duration, 16)
	obs := &rateObserver{}
	pacer := pace.New(pace.Options{
		Jitter: -1,
		// The hold is observed, never slept: the channel never fires, and
		// the test ends the wait by cancelling the call.
		Timer: func(d time.Duration) (<-chan time.Time, func() bool) {
			waits <- d
			return nil, func() bool { return true }
		},
	})
	c, err := NewClient(ClientOptions{BaseURL: srv.URL, Token: testToken, RootCAs: testRoots(), Pacer: pacer, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Me(ctx); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	if !slices.Equal(obs.rates, []string{"normal=117"}) {
		t.Errorf("RateLimit calls %v, want [normal=117]", obs.rates)
	}
	obs.mu.Unlock()

	if _, err := c.GetUpload(ctx, "u"); err == nil {
		t.Fatal("want the 429")
	}
	held, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.GetUpload(held, "u"); done <- err }()
	d := <-waits
	cancel()
	err = <-done
	if d < 25*time.Second || d > 31*time.Second {
		t.Errorf("pacer held the route for %v, want the 30s of Retry-After", d)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "v1_get_upload: waiting for rate limit") {
		t.Errorf("held call: err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := hits["/api/supersplat/v1/splats/uploads/u"]; n != 1 {
		t.Errorf("the held call reached the server: %d requests", n)
	}
}

// partStorage is a stand-in for S3 that records what a part PUT carried.
type partStorage struct {
	mu      sync.Mutex
	headers []http.Header
	sums    []string
	lengths []int64
}

func (s *partStorage) handle(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, _ := io.Copy(h, r.Body)
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.sums = append(s.sums, fmt.Sprintf("%x", h.Sum(nil)))
	s.lengths = append(s.lengths, r.ContentLength)
	s.mu.Unlock()
	if n != r.ContentLength {
		w.WriteHeader(400)
		return
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/noetag"):
	case strings.HasPrefix(r.URL.Path, "/weak"):
		w.Header().Set("ETag", `W/"abc"`)
	default:
		w.Header().Set("ETag", `"abc"`)
	}
	w.WriteHeader(200)
}

func TestV1PutPartStreamsAndKeepsETagExactly(t *testing.T) {
	t.Parallel()
	const size = 3<<20 + 17
	ps := &partStorage{}
	storage := newStorageServer(t, ps.handle)
	obs := &testObserver{}
	c := newTestClient(t, "https://api.invalid", obs, 0)

	want := sha256.New()
	io.Copy(want, &patternReader{left: size})
	var last int64
	etag, err := c.PutPart(context.Background(), storage.URL+"/b/k?partNumber=1&uploadId=x&X-Amz-Signature=deadbeefdeadbeef",
		&patternReader{left: size}, size, func(sent int64) { last = sent })
	if err != nil {
		t.Fatal(err)
	}
	if etag != `"abc"` {
		t.Errorf("ETag = %s, want \"abc\" with its quotes", etag)
	}
	ps.mu.Lock()
	h, sum, length := ps.headers[0], ps.sums[0], ps.lengths[0]
	ps.mu.Unlock()
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-amz-") {
			t.Errorf("part PUT sent %s", k)
		}
	}
	if h.Get("Authorization") != "" || h.Get("Content-Type") != "" || length != size {
		t.Errorf("part PUT headers %v, Content-Length %d", h, length)
	}
	if sum != fmt.Sprintf("%x", want.Sum(nil)) || last != size {
		t.Errorf("storage got other bytes, or progress ended at %d", last)
	}
	// A weak ETag is kept as it is, too.
	if etag, err := c.PutPart(context.Background(), storage.URL+"/weak?sig=s", strings.NewReader("x"), 1, nil); err != nil || etag != `W/"abc"` {
		t.Errorf("weak ETag: %q, %v", etag, err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.uploadBytes != size+1 || obs.uploadDone != 0 || !slices.Equal(obs.requests, []string{"v1_part_put 200", "v1_part_put 200"}) {
		t.Errorf("observer: bytes %d, done %d, requests %v", obs.uploadBytes, obs.uploadDone, obs.requests)
	}
}

func TestV1PutPartWithoutETag(t *testing.T) {
	t.Parallel()
	storage := newStorageServer(t, (&partStorage{}).handle)
	c := newTestClient(t, "https://api.invalid", nil, 0)
	_, err := c.PutPart(context.Background(), storage.URL+"/noetag?X-Amz-Signature=secretsecret", strings.NewReader("abc"), 3, nil)
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Route != RouteV1PartPut || !strings.Contains(pe.Reason, "ETag") {
		t.Fatalf("err = %v, want a ProtocolError", err)
	}
}

// TestV1PutPartStorageErrors: S3's XML Code and Message reach the APIError
// text, the signed query never does, and state reads a refused URL as
// "sign again".
func TestV1PutPartStorageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code, msg string
		status    int
		resign    bool
	}{
		{"AccessDenied", "Request has expired", 403, true},
		{"SignatureDoesNotMatch", "The request signature we calculated does not match", 403, true},
		{"EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.", 400, false},
		{"NoSuchUpload", "The specified upload does not exist.", 404, true},
		{"SlowDown", "Please reduce your request rate.", 503, false},
	}
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for _, tc := range cases {
			if r.URL.Path == "/"+tc.code {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tc.status)
				// S3 echoes the request's query (credential and signature) in some errors.
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Error><Code>%s</Code><Message>%s</Message><CanonicalQueryString>%s</CanonicalQueryString><RequestId>R1</RequestId></Error>`,
					tc.code, tc.msg, strings.ReplaceAll(r.URL.RawQuery, "&", "&amp;"))
			}
		}
	})
	c := newTestClient(t, "https://api.invalid", nil, 0)
	const query = "partNumber=1&X-Amz-Credential=AKIAEXAMPLE%2F20250101&X-Amz-Signature=0f1e2d3c4b5a69788796"
	for _, tc := range cases {
		_, err := c.PutPart(context.Background(), storage.URL+"/"+tc.code+"?"+query, strings.NewReader("part"), 4, nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Route != RouteV1PartPut || !ae.FromStorage() {
			t.Errorf("%s: err = %v", tc.code, err)
			continue
		}
		if want := tc.code + ": " + tc.msg; ae.Message != want {
			t.Errorf("%s: message %q, want %q", tc.code, ae.Message, want)
		}
		if ((&state.Policy{}).Decide(context.Background(), err, 1, time.Now()).Action == state.Resign) != tc.resign {
			t.Errorf("%s: re-sign = %v", tc.code, !tc.resign)
		}
		for _, leak := range []string{"0f1e2d3c4b5a", "AKIAEXAMPLE", testToken} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: error %q leaks %q", tc.code, err, leak)
			}
		}
	}
}

// TestV1BearerNeverReachesStorage: a storage server that records the
// Authorization header sees none, from a part PUT, from a part PUT that
// storage redirects, or from an API call redirected to storage.
func TestV1BearerNeverReachesStorage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string // "path auth=..."
	recorder := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/landing?X-Amz-Signature=other", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("ETag", `"e"`)
	})
	c, _, _ := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, recorder.URL+"/from-api", http.StatusTemporaryRedirect)
	}))
	ctx := context.Background()

	if _, err := c.PutPart(ctx, recorder.URL+"/part?X-Amz-Signature=s1", strings.NewReader("abc"), 3, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.PutPart(ctx, recorder.URL+"/redirect?X-Amz-Signature=s2", strings.NewReader("abc"), 3, nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusTemporaryRedirect || ae.Route != RouteV1PartPut {
		t.Errorf("redirected part PUT: err = %v, want an APIError 307 (a streamed part is not replayed)", err)
	}
	_, err = c.GetUpload(ctx, "u")
	if !errors.As(err, &ae) || ae.Status != http.StatusTemporaryRedirect || ae.Route != RouteV1GetUpload {
		t.Errorf("API redirect to another origin: err = %v, want an APIError 307", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/part auth=", "/redirect auth="}; !slices.Equal(seen, want) {
		t.Errorf("storage saw %q, want %q (no bearer, no redirect followed)", seen, want)
	}
}

func TestV1PutPartURLRules(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "https://api.invalid", nil, 0)
	for _, u := range []string{"http://storage.example/k?X-Amz-Signature=secretsecret", "relative/k?X-Amz-Signature=secretsecret"} {
		_, err := c.PutPart(context.Background(), u, strings.NewReader("x"), 1, nil)
		if err == nil || strings.Contains(err.Error(), "secretsecret") {
			t.Errorf("PutPart(%q) = %v", u, err)
		}
	}
	var auth []string
	var mu sync.Mutex
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("ETag", `"local"`)
	}))
	t.Cleanup(local.Close)
	etag, err := c.PutPart(context.Background(), local.URL+"/k?sig=s", strings.NewReader("hello"), 5, nil)
	if err != nil || etag != `"local"` {
		t.Fatalf("plain http on loopback: %q, %v", etag, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) != 1 || auth[0] != "" {
		t.Errorf("Authorization sent to loopback storage: %q", auth)
	}
}

func TestV1PutPartAbortsStall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	t.Cleanup(func() { close(release) })
	c := newTestClient(t, "https://api.invalid", nil, 300*time.Millisecond)
	const size = 1 << 30
	_, err := c.PutPart(context.Background(), storage.URL+"/k?X-Amz-Signature=secretsecret", &patternReader{left: size}, size, nil)
	if !errors.Is(err, errPutStalled) || strings.Contains(err.Error(), "secretsecret") {
		t.Fatalf("err = %v, want a scrubbed stall", err)
	}
}

// TestV1SecretsNeverInErrorsOrLogs drives every v1 call against servers that
// echo the bearer and the signed query back, and searches every error and
// every debug log line for them.
func TestV1SecretsNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	const sig = "X-Amz-Signature=7a6b5c4d3e2f1a0b9c8d"
	storage := newStorageServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/drop" {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(403)
		fmt.Fprintf(w, `<Error><Code>AccessDenied</Code><Message>denied for %s</Message></Error>`,
			strings.ReplaceAll("https://"+r.Host+r.URL.RequestURI(), "&", "&amp;"))
	})
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/drop") {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		writeJSON(w, 401, `{"error":"bad `+r.Header.Get("Authorization")+` for `+r.Header.Get("Idempotency-Key")+`"}`)
	}))
	t.Cleanup(api.Close)
	var logs syncBuffer
	c, err := NewClient(ClientOptions{BaseURL: api.URL, Token: testToken, RootCAs: testRoots(),
		Logger: zerolog.New(&logs).Level(zerolog.DebugLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var errs []error
	collect := func(err error) { errs = append(errs, err) }
	_, err = c.Me(ctx)
	collect(err)
	_, err = c.ListSplats(ctx, 1, 0)
	collect(err)
	_, err = c.SplatV1(ctx, "drop")
	collect(err)
	_, _, err = c.CreateUpload(ctx, "key-1", CreateUploadRequest{SourceFormat: SourceFormatPLY})
	collect(err)
	_, err = c.GetUpload(ctx, "drop")
	collect(err)
	_, err = c.PartURLs(ctx, "u", []int{1})
	collect(err)
	_, _, err = c.CompleteUpload(ctx, "u", []CompletedPart{{1, `"e"`}})
	collect(err)
	_, err = c.PutPart(ctx, storage.URL+"/k?X-Amz-Credential=AKIAEXAMPLE%2Fx&"+sig, strings.NewReader("abc"), 3, nil)
	collect(err)
	_, err = c.PutPart(ctx, storage.URL+"/drop?X-Amz-Credential=AKIAEXAMPLE%2Fx&"+sig, strings.NewReader("abc"), 3, nil)
	collect(err)

	for i, err := range errs {
		if err == nil {
			t.Fatalf("call %d succeeded", i)
		}
		for _, leak := range []string{testToken, "7a6b5c4d3e2f", "AKIAEXAMPLE"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error %q leaks %q", err, leak)
			}
		}
	}
	out := logs.String()
	if !strings.Contains(out, "v1_part_put") || !strings.Contains(out, "v1_me") {
		t.Fatalf("debug log did not record the calls:\n%s", out)
	}
	for _, leak := range []string{testToken, "7a6b5c4d3e2f", "AKIAEXAMPLE"} {
		if strings.Contains(out, leak) {
			t.Errorf("log leaks %q:\n%s", leak, out)
		}
	}
}

func TestV1RoutesListed(t *testing.T) {
	t.Parallel()
	for _, r := range []string{RouteV1Me, RouteV1Splats, RouteV1GetSplat, RouteV1CreateUpload, RouteV1GetUpload, RouteV1PartURLs, RouteV1Complete, RouteV1PartPut} {
		if !slices.Contains(Routes, r) {
			t.Errorf("Routes lacks %s", r)
		}
	}
	if (&APIError{Route: RouteV1PartPut}).FromStorage() != true || (&APIError{Route: RouteV1Complete}).FromStorage() {
		t.Error("FromStorage: only the part PUT is storage")
	}
}

func TestCutRunes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"日本語", 2, "日本"},
		{"a\xffb", 2, "a\xff"},
		{"", 3, ""},
	} {
		if got := CutRunes(tc.in, tc.n); got != tc.want {
			t.Errorf("CutRunes(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

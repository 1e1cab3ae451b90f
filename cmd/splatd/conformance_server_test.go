package main

// confServer is a second, deliberately different implementation of
// docs/api-legacy.md (with the facts it records beyond the written contract), written independently of
// uploader/apisim so that the conformance tests catch places where splatd
// only works because of the simulator's choices. It varies what the spec
// leaves open, per test:
//
//   - the signed-URL key field is s3Key (or storageKey); the request field is
//     fileName, checked by its exact name;
//   - the signed URL points at the API's own host and port under /storage/
//     with an S3-style query (X-Amz-Signature, X-Amz-Expires, ...), or at a
//     separate plain-HTTP loopback storage server; the PUT answers 200 (or
//     201, 204) with an empty body;
//   - publish answers 201 with id as a JSON number, version a number,
//     release_notes null, thumbnails 0, format "" and task running;
//   - get-splat says running for the first N polls, then "complete" (not
//     "completed") with completedAt, or no status at all with completedAt,
//     or "failed" with a message;
//   - rate-limit headers absent everywhere, or only on some routes, or a
//     small account-wide fixed window with Reset in epoch seconds that is
//     enforced with 429;
//   - checkpoints: opaque string ids, newest first, pagination {hasMore}
//     only, skip = last id, limit > 50 is a 400;
//   - errors are {"error": "..."}; a wrong bearer is a 401.
//
// It records what a conformance test checks: every request, the
// Authorization headers seen by storage, each stored object's sha256, and
// the publish bodies.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Rate-limit header modes.
const (
	confRateNone    = "none"    // no X-RateLimit-* header on any response
	confRatePartial = "partial" // headers on checkpoints and signed-url only; none on publish/get-splat
	confRateLimited = "limited" // every API response, a small enforced window
)

type confOptions struct {
	KeyField        string // "s3Key" (default) or "storageKey"
	SeparateStorage bool   // storage on its own plain-HTTP loopback server
	StorageStatus   int    // status of a successful PUT: 200 (default), 201, 204
	ExpireFirstPut  bool   // the first PUT of each file name gets S3's 403 "Request has expired"

	PendingPolls int    // get-splat answers "running" this many times first
	Terminal     string // "complete" (default), or "-" for no status with completedAt set
	// ProcessFail, when set, gives the processing failure message of a
	// title ("" = succeeds).
	ProcessFail func(title string) string
	// PublishFail, when set, refuses the publish of a title with a status
	// and an error text (0 = accepted).
	PublishFail func(title string) (int, string)

	RateMode   string // confRate*; default none
	RateLimit  int    // requests per window in limited mode (default 6)
	RateWindow int    // window length in seconds in limited mode (default 2)

	HTTP2      bool   // the API speaks HTTP/2 (httptest's default is HTTP/1.1 only)
	PathPrefix string // the API lives under this path (base_url carries it), e.g. "/beta"
	BaseSlash  bool   // the config's base_url ends with "/", as users write it

	Checkpoints     int // checkpoints of branch "main" (default 123)
	CheckpointLimit int // page size when no limit is given (default 10)
	CheckpointCap   int // pages never hold more than this, whatever the limit (0 = no cap)
}

type confSplat struct {
	ID        int
	Hash      string
	Title     string
	Key       string
	Polls     int
	CreatedAt time.Time
}

type confCheckpoint struct {
	ID        string
	UserID    int
	CreatedAt time.Time
	Desc      string
}

type confServer struct {
	t       *testing.T
	o       confOptions
	token   string
	api     *httptest.Server
	storage *httptest.Server // == api unless SeparateStorage
	caFile  string
	secret  []byte

	mu            sync.Mutex
	requests      int            // API requests (not storage)
	byRoute       map[string]int // route → API requests
	byStatus      map[int]int    // status → API responses
	storageAuth   []string       // non-empty Authorization headers seen by storage
	storagePuts   int
	stored        map[string]string // key → sha256 of the object
	refused       map[string]bool   // ExpireFirstPut: file names already refused once
	putsPerSHA    map[string]int
	publishBodies []map[string]any
	publishPerSHA map[string]int // sha256 of the published object → publishes
	signatures    []string       // every X-Amz-Signature issued
	fileNames     []string       // fileName of every signed-URL request
	splats        map[int]*confSplat
	nextID        int
	cps           []confCheckpoint // newest first
	violations    []string         // protocol errors of the client, reported by the tests
	winStart      int64            // limited mode: epoch second the window started
	winUsed       int
	zeroRemaining int // limited mode: responses that said Remaining 0
	// firstReadLimited: read routes whose very first request met a spent
	// window (a 429).
	firstReadLimited []string
}

func newConfServer(t *testing.T, o confOptions) *confServer {
	t.Helper()
	if o.KeyField == "" {
		o.KeyField = "s3Key"
	}
	if o.StorageStatus == 0 {
		o.StorageStatus = http.StatusOK
	}
	if o.Terminal == "" {
		o.Terminal = "complete"
	}
	if o.RateMode == "" {
		o.RateMode = confRateNone
	}
	if o.RateLimit == 0 {
		o.RateLimit = 6
	}
	if o.RateWindow == 0 {
		o.RateWindow = 2
	}
	if o.Checkpoints == 0 {
		o.Checkpoints = 123
	}
	if o.CheckpointLimit == 0 {
		o.CheckpointLimit = 10
	}
	s := &confServer{
		t: t, o: o,
		token:         "conf-tok-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-Zq7",
		secret:        []byte("conformance storage secret"),
		byRoute:       map[string]int{},
		byStatus:      map[int]int{},
		stored:        map[string]string{},
		refused:       map[string]bool{},
		putsPerSHA:    map[string]int{},
		publishPerSHA: map[string]int{},
		splats:        map[int]*confSplat{},
		nextID:        50,
	}
	// Checkpoints: opaque ids (not sortable into creation order), newest first.
	base := time.Date(2024, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := o.Checkpoints - 1; i >= 0; i-- {
		sum := sha256.Sum256([]byte("cp" + strconv.Itoa(i)))
		s.cps = append(s.cps, confCheckpoint{
			ID:        hex.EncodeToString(sum[:])[:24],
			UserID:    1000 + i%3,
			CreatedAt: base.Add(time.Duration(i) * 7 * time.Minute),
			Desc:      fmt.Sprintf("checkpoint number %d", i),
		})
	}

	mux := http.NewServeMux()
	mux.HandleFunc(o.PathPrefix+"/api/", s.serveAPI)
	if o.SeparateStorage {
		// Storage on its own plain-HTTP loopback server; the API host
		// does not serve /storage/ in this variant.
		smux := http.NewServeMux()
		smux.HandleFunc("/storage/", s.serveStorage)
		s.storage = httptest.NewServer(smux)
		t.Cleanup(s.storage.Close)
	} else {
		mux.HandleFunc("/storage/", s.serveStorage)
	}
	s.api = httptest.NewUnstartedServer(mux)
	s.api.EnableHTTP2 = o.HTTP2
	s.api.StartTLS()
	t.Cleanup(s.api.Close)
	if s.storage == nil {
		s.storage = s.api
	}
	s.caFile = filepath.Join(t.TempDir(), "conf-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.api.Certificate().Raw})
	if err := os.WriteFile(s.caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// URL is the base_url of the API (with the path prefix, if any).
func (s *confServer) URL() string { return s.api.URL + s.o.PathPrefix }

func (s *confServer) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// --- API ---------------------------------------------------------------------

func (s *confServer) serveAPI(w http.ResponseWriter, r *http.Request) {
	route := "other"
	path := strings.TrimPrefix(r.URL.Path, s.o.PathPrefix)
	switch {
	case path == "/api/upload/signed-url":
		route = "signed_url"
	case path == "/api/splats/publish":
		route = "publish"
	case strings.HasPrefix(path, "/api/splats/"):
		route = "get_splat"
	case strings.HasPrefix(path, "/api/branches/") && strings.HasSuffix(path, "/checkpoints"):
		route = "checkpoints"
	}
	rec := &confStatusWriter{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		s.byStatus[rec.status]++
		s.mu.Unlock()
	}()
	s.mu.Lock()
	s.requests++
	s.byRoute[route]++
	first := s.byRoute[route] == 1
	s.mu.Unlock()

	// Rate limit first, as a gateway does.
	if !s.rateLimit(rec, route) {
		if first && r.Method == http.MethodGet {
			s.mu.Lock()
			s.firstReadLimited = append(s.firstReadLimited, route)
			s.mu.Unlock()
		}
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		confError(rec, http.StatusUnauthorized, "Unauthorized: invalid or missing access token")
		return
	}
	switch route {
	case "signed_url":
		s.signedURL(rec, r)
	case "publish":
		s.publish(rec, r)
	case "get_splat":
		s.getSplat(rec, r)
	case "checkpoints":
		s.checkpoints(rec, r)
	default:
		confError(rec, http.StatusNotFound, "not found")
	}
}

type confStatusWriter struct {
	http.ResponseWriter
	status int
}

func (c *confStatusWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *confStatusWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

// rateLimit sets the headers of the mode and enforces the limited window;
// false means a 429 was written.
func (s *confServer) rateLimit(w http.ResponseWriter, route string) bool {
	switch s.o.RateMode {
	case confRateNone:
		return true
	case confRatePartial:
		if route == "checkpoints" || route == "signed_url" {
			// A generous per-minute limit that never runs out here.
			reset := time.Now().Truncate(time.Minute).Add(time.Minute).Unix()
			w.Header().Set("X-RateLimit-Limit", "240")
			w.Header().Set("X-RateLimit-Remaining", "200")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
		}
		return true
	}
	// Limited: one account-wide fixed window aligned to whole epoch seconds,
	// so the advertised Reset (epoch seconds) is exactly when it renews.
	now := time.Now().Unix()
	win := int64(s.o.RateWindow)
	start := now - now%win
	s.mu.Lock()
	if start != s.winStart {
		s.winStart, s.winUsed = start, 0
	}
	s.winUsed++
	used := s.winUsed
	s.mu.Unlock()
	remaining := s.o.RateLimit - used
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.o.RateLimit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(remaining, 0)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(start+win, 10))
	if remaining == 0 {
		s.mu.Lock()
		s.zeroRemaining++
		s.mu.Unlock()
	}
	if remaining < 0 {
		confError(w, http.StatusTooManyRequests, "Too many requests")
		return false
	}
	return true
}

func confError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func confJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// jsonBody decodes a JSON object body, insisting on the content type.
func (s *confServer) jsonBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		s.violate("%s %s: Content-Type %q, want application/json", r.Method, r.URL.Path, ct)
		confError(w, http.StatusBadRequest, "Content-Type must be application/json")
		return nil, false
	}
	var m map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&m); err != nil {
		confError(w, http.StatusBadRequest, "invalid JSON body")
		return nil, false
	}
	return m, true
}

func (s *confServer) sign(key string, expires int) string {
	m := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(m, "%s\n%d", key, expires)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *confServer) signedURL(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		confError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, ok := s.jsonBody(w, r)
	if !ok {
		return
	}
	name, _ := body["fileName"].(string) // the exact name: "filename" is the old docs' spelling
	if name == "" || !strings.Contains(name, ".") {
		s.violate("signed-url body without a fileName with extension: %v", body)
		confError(w, http.StatusBadRequest, "fileName is required")
		return
	}
	s.mu.Lock()
	s.fileNames = append(s.fileNames, name)
	s.nextID++
	key := fmt.Sprintf("u/%d/%s", s.nextID, url.PathEscape(name))
	s.mu.Unlock()
	expires := 900
	sig := s.sign(key, expires)
	s.mu.Lock()
	s.signatures = append(s.signatures, sig)
	s.mu.Unlock()
	q := url.Values{}
	q.Set("X-Amz-Algorithm", "AWS4-HMAC-SHA256")
	q.Set("X-Amz-Credential", "AKIACONFORMANCE/20240301/us-east-1/s3/aws4_request")
	q.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
	q.Set("X-Amz-Expires", strconv.Itoa(expires))
	q.Set("X-Amz-SignedHeaders", "host")
	q.Set("X-Amz-Signature", sig)
	u := s.storage.URL + "/storage/" + key + "?" + q.Encode()
	confJSON(w, http.StatusOK, map[string]any{"signedUrl": u, s.o.KeyField: key})
}

// --- storage -----------------------------------------------------------------

func (s *confServer) serveStorage(w http.ResponseWriter, r *http.Request) {
	if a := r.Header.Get("Authorization"); a != "" {
		s.mu.Lock()
		s.storageAuth = append(s.storageAuth, a)
		s.mu.Unlock()
	}
	if r.Method != http.MethodPut {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	// S3 signs the canonical URI: the path must arrive exactly as issued
	// (same percent-encoding), not re-encoded by the client.
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	key := strings.TrimPrefix(rawPath, "/storage/")
	q := r.URL.Query()
	exp, _ := strconv.Atoi(q.Get("X-Amz-Expires"))
	if sig := q.Get("X-Amz-Signature"); !hmac.Equal([]byte(sig), []byte(s.sign(key, exp))) {
		s.violate("storage PUT %s: signature does not match the path as issued", rawPath)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "<Error><Code>SignatureDoesNotMatch</Code></Error>")
		return
	}
	if s.o.ExpireFirstPut {
		name := key[strings.LastIndexByte(key, '/')+1:] // once per file, not per URL
		s.mu.Lock()
		first := !s.refused[name]
		s.refused[name] = true
		s.mu.Unlock()
		if first {
			_, _ = io.Copy(io.Discard, r.Body)
			// S3's 403 body echoes the request, signature included.
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>"+
				"<Message>The request signature we calculated does not match the signature you provided.</Message>"+
				"<AWSAccessKeyId>AKIACONFORMANCE</AWSAccessKeyId><SignatureProvided>%s</SignatureProvided>"+
				"<CanonicalRequest>PUT\n%s\n%s\nhost:%s</CanonicalRequest><RequestId>4442587FB7D0A2F9</RequestId></Error>",
				q.Get("X-Amz-Signature"), rawPath, confCanonicalQuery(q), r.Host)
			return
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "binary/octet-stream" {
		s.violate("storage PUT Content-Type %q, want binary/octet-stream", ct)
	}
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		s.violate("storage PUT without Content-Length (transfer encoding %v)", r.TransferEncoding)
	}
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		s.violate("storage PUT body %d bytes, Content-Length %d", n, r.ContentLength)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	s.storagePuts++
	s.stored[key] = sum
	s.putsPerSHA[sum]++
	s.mu.Unlock()
	// A real S3 PUT answers 200 with an empty body and an ETag.
	w.Header().Set("ETag", `"`+sum[:32]+`"`)
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(s.o.StorageStatus)
}

// --- publish and get-splat ---------------------------------------------------

func (s *confServer) publish(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		confError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, ok := s.jsonBody(w, r)
	if !ok {
		return
	}
	other := "storageKey"
	if s.o.KeyField == "storageKey" {
		other = "s3Key"
	}
	key, _ := body[s.o.KeyField].(string)
	if _, has := body[other]; has {
		s.violate("publish body carries %q although the signed-URL answer used %q: %v", other, s.o.KeyField, body)
	}
	if key == "" {
		s.violate("publish body without %q: %v", s.o.KeyField, body)
		confError(w, http.StatusBadRequest, s.o.KeyField+" is required")
		return
	}
	if f, _ := body["format"].(string); f != "sog" && f != "compressed.ply" {
		s.violate("publish format %q", body["format"])
		confError(w, http.StatusBadRequest, "format must be sog or compressed.ply")
		return
	}
	title, _ := body["title"].(string)
	s.mu.Lock()
	sum, uploaded := s.stored[key]
	s.publishBodies = append(s.publishBodies, body)
	s.mu.Unlock()
	if !uploaded {
		s.violate("publish of key %q that was never uploaded", key)
		confError(w, http.StatusBadRequest, "no uploaded object for "+s.o.KeyField)
		return
	}
	if s.o.PublishFail != nil {
		if st, msg := s.o.PublishFail(title); st != 0 {
			confError(w, st, msg)
			return
		}
	}
	s.mu.Lock()
	s.nextID++
	sp := &confSplat{ID: s.nextID, Hash: fmt.Sprintf("h%07x", s.nextID*7919), Title: title, Key: key, CreatedAt: time.Now().UTC()}
	s.splats[sp.ID] = sp
	s.publishPerSHA[sum]++
	s.mu.Unlock()
	confJSON(w, http.StatusCreated, s.record(sp, "running", "", false))
}

func (s *confServer) viewerURL(hash string) string {
	return "https://viewer.conformance.invalid/view?id=" + hash
}

func (s *confServer) record(sp *confSplat, status, msg string, completed bool) map[string]any {
	m := map[string]any{
		"id":             sp.ID, // a JSON number, as observed
		"hash":           sp.Hash,
		"title":          sp.Title,
		"description":    "",
		"format":         "",
		"version":        0,
		"currentVersion": 1,
		"release_notes":  nil,
		"thumbnails":     0,
		"size":           0,
		"views":          0,
		"comments":       0,
		"starred":        0,
		"featuredWeight": 0,
		"listed":         false,
		"tags":           []string{},
		"url":            s.viewerURL(sp.Hash),
		"userId":         4242,
		"completedAt":    nil,
		"createdAt":      sp.CreatedAt.Format(time.RFC3339Nano),
		"modifiedAt":     time.Now().UTC().Format(time.RFC3339Nano),
	}
	task := map[string]any{"message": msg}
	if status != "" {
		task["status"] = status
	}
	m["task"] = task
	if completed {
		m["completedAt"] = time.Now().UTC().Format(time.RFC3339Nano)
		m["format"] = "sog"
	}
	return m
}

func (s *confServer) getSplat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		confError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, s.o.PathPrefix+"/api/splats/"))
	s.mu.Lock()
	sp := s.splats[id]
	if sp != nil {
		sp.Polls++
	}
	s.mu.Unlock()
	if err != nil || sp == nil {
		s.violate("get-splat of unknown id %q", r.URL.Path)
		confError(w, http.StatusNotFound, "splat not found")
		return
	}
	if sp.Polls <= s.o.PendingPolls {
		confJSON(w, http.StatusOK, s.record(sp, "running", "", false))
		return
	}
	if s.o.ProcessFail != nil {
		if msg := s.o.ProcessFail(sp.Title); msg != "" {
			confJSON(w, http.StatusOK, s.record(sp, "failed", msg, false))
			return
		}
	}
	status := s.o.Terminal
	if status == "-" {
		status = ""
	}
	confJSON(w, http.StatusOK, s.record(sp, status, "", true))
}

// --- checkpoints -------------------------------------------------------------

func (s *confServer) checkpoints(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		confError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	branch := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, s.o.PathPrefix+"/api/branches/"), "/checkpoints")
	if branch != "main" {
		confError(w, http.StatusNotFound, "Branch not found")
		return
	}
	q := r.URL.Query()
	limit := s.o.CheckpointLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			confError(w, http.StatusBadRequest, "limit must be a positive number")
			return
		}
		if n > 50 {
			confError(w, http.StatusBadRequest, "limit cannot exceed 50")
			return
		}
		limit = n
	}
	start := 0
	if skip := q.Get("skip"); skip != "" {
		start = -1
		for i, c := range s.cps {
			if c.ID == skip {
				start = i + 1
			}
		}
		if start < 0 {
			confError(w, http.StatusBadRequest, "skip is not a checkpoint of this branch")
			return
		}
	}
	if s.o.CheckpointCap > 0 {
		limit = min(limit, s.o.CheckpointCap)
	}
	end := min(start+limit, len(s.cps))
	res := []map[string]any{}
	for _, c := range s.cps[start:end] {
		res = append(res, map[string]any{
			"id":          c.ID,
			"user":        map[string]any{"id": c.UserID, "fullName": "User " + strconv.Itoa(c.UserID), "username": "user" + strconv.Itoa(c.UserID)},
			"createdAt":   c.CreatedAt.Format("2006-01-02T15:04:05.000Z"),
			"description": c.Desc,
		})
	}
	confJSON(w, http.StatusOK, map[string]any{"result": res, "pagination": map[string]any{"hasMore": end < len(s.cps)}})
}

// --- what the tests read ------------------------------------------------------

type confStats struct {
	Requests int
	ByRoute  map[string]int
	ByStatus map[int]int
	// FirstReadLimited are the read routes whose first request drew a 429.
	FirstReadLimited []string
	StorageAuth      []string
	StoragePuts      int
	PutsPerSHA       map[string]int
	PublishPerSHA    map[string]int
	PublishBodies    []map[string]any
	Signatures       []string
	Violations       []string
	FileNames        []string
	ZeroRemaining    int
}

func (s *confServer) stats() confStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := confStats{
		Requests: s.requests, StoragePuts: s.storagePuts, ZeroRemaining: s.zeroRemaining,
		ByRoute: map[string]int{}, ByStatus: map[int]int{},
		PutsPerSHA: map[string]int{}, PublishPerSHA: map[string]int{},
		StorageAuth:      append([]string(nil), s.storageAuth...),
		FirstReadLimited: append([]string(nil), s.firstReadLimited...),
		PublishBodies:    append([]map[string]any(nil), s.publishBodies...),
		Signatures:       append([]string(nil), s.signatures...),
		Violations:       append([]string(nil), s.violations...),
		FileNames:        append([]string(nil), s.fileNames...),
	}
	for k, v := range s.byRoute {
		st.ByRoute[k] = v
	}
	for k, v := range s.byStatus {
		st.ByStatus[k] = v
	}
	for k, v := range s.putsPerSHA {
		st.PutsPerSHA[k] = v
	}
	for k, v := range s.publishPerSHA {
		st.PublishPerSHA[k] = v
	}
	return st
}

// config writes a splatd config for this server to dir and returns its
// path; watch is the watched folder (created), extra YAML is appended.
func (s *confServer) config(t *testing.T, dir, watch, tokenFile, extra string) string {
	t.Helper()
	if err := os.MkdirAll(watch, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	base := s.URL()
	if s.o.BaseSlash {
		base += "/"
	}
	fmt.Fprintf(&b, "api:\n  base_url: %s\n  ca_file: %s\n  token_file: %s\n  timeout: 20s\n", base, s.caFile, tokenFile)
	fmt.Fprintf(&b, "watch:\n  - path: %s\n    recursive: true\n", watch)
	fmt.Fprintf(&b, "settle: 300ms\nrescan_interval: 1m\nstate_dir: %s\nworkers: 2\n", filepath.Join(dir, "state"))
	b.WriteString("poll: {interval: 200ms, max_interval: 400ms, timeout: 5m}\n")
	b.WriteString("metrics: {listen: \"127.0.0.1:0\"}\nlog: {level: debug, format: json}\n")
	b.WriteString(extra)
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// viewerURLs returns the viewer links of the splats published from the
// object whose sha256 is sum.
func (s *confServer) viewerURLs(sum string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sp := range s.splats {
		if s.stored[sp.Key] == sum {
			out = append(out, s.viewerURL(sp.Hash))
		}
	}
	return out
}

// publishesOfTitle counts the publish requests (accepted or not) whose
// title is title.
func (s *confServer) publishesOfTitle(title string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.publishBodies {
		if b["title"] == title {
			n++
		}
	}
	return n
}

// confCanonicalQuery is the query as S3 canonicalises it: keys sorted,
// values URI-encoded (which is not url.Values.Encode's form for every byte).
func confCanonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, url.PathEscape(k)+"="+strings.ReplaceAll(url.PathEscape(q.Get(k)), "/", "%2F"))
	}
	return strings.Join(parts, "&")
}

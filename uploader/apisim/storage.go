package apisim

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// issuedKey is a storage key handed out by the signed-URL route.
type issuedKey struct {
	fileName string
	issuedAt time.Time
}

// object is a completed upload.
type object struct {
	path   string // "" with DiscardObjects
	size   int64
	sha256 string
	head   []byte // first bytes, to tell PLY/SOG from anything else
}

const (
	objectsPrefix = "/objects/"
	headLen       = 8
	// drainCap bounds how much of a refused upload's body storage reads
	// before answering, so that the client reliably sees the answer rather
	// than a write error, without reading gigabytes for nothing.
	drainCap = 64 << 20
)

// Sign issues a storage key for fileName and its signed PUT URL, as the
// signed-URL route does but without an API request: benchmarks use it to
// give `curl -T` the same storage endpoint as the client. In S3 mode the
// URL is "" if presigning failed (it makes no request, so only a broken
// Options.S3 can make it fail, and New has checked that).
func (s *Server) Sign(fileName string) (signedURL, key string) {
	u, key, err := s.signURL(context.Background(), fileName)
	if err != nil {
		s.log.Error().Err(err).Msg("sign")
	}
	return u, key
}

// signURL issues a storage key for fileName and its signed PUT URL: the
// simulator's own HMAC-signed URL, or in S3 mode a presigned PutObject URL
// of the bucket, made without the lock (an ExpiredURLs fault waits there
// until S3 sees the URL as expired).
func (s *Server) signURL(ctx context.Context, fileName string) (signedURL, key string, err error) {
	s.mu.Lock()
	expires := s.now().Add(s.o.URLExpiry)
	fault := s.urlFault(&s.faults.ExpiredURLs)
	if fault == urlExpired {
		expires = s.now()
	}
	signedURL, key = s.sign(fileName, expires)
	s.mu.Unlock()
	if s.s3 != nil {
		signedURL, err = s.s3.presignObject(ctx, key, expires, fault)
	}
	return signedURL, key, err
}

// urlFault draws the fault of the next URL handed out: expired (the count
// at expired), or in S3 mode signed for the wrong region. Callers hold s.mu.
func (s *Server) urlFault(expired *int) urlFault {
	switch {
	case s.take(expired, 0):
		s.stats.Faults++
		return urlExpired
	case s.s3 != nil && s.take(&s.faults.WrongRegionURLs, 0):
		s.stats.Faults++
		return urlWrongRegion
	}
	return urlOK
}

// sign creates a key and its URL (the simulator's own). Callers hold s.mu.
func (s *Server) sign(fileName string, expires time.Time) (string, string) {
	key := fmt.Sprintf("uploads/%016x/%s", s.rng.Uint64(), safeName(fileName))
	s.issued[key] = issuedKey{fileName: fileName, issuedAt: s.now()}
	s.stats.SignedURLs++
	exp := strconv.FormatInt(expires.Unix(), 10)
	q := url.Values{"expires": {exp}, "sig": {s.signature(key, exp)}}
	return s.stURL + objectsPrefix + key + "?" + q.Encode(), key
}

func (s *Server) signature(key, expires string) string {
	m := hmac.New(sha256.New, s.secret)
	io.WriteString(m, key)
	io.WriteString(m, "\n")
	io.WriteString(m, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// safeName keeps a file name readable in a key without needing URL escaping.
func safeName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	b := []byte(name)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "file"
	}
	return string(b)
}

// StorageHandler serves the object storage: PUT /objects/<key>?expires&sig.
func (s *Server) StorageHandler() http.Handler { return http.HandlerFunc(s.serveStorage) }

// Part PUTs (v1) go to /parts/<uploadId>/<n>; everything else is the
// legacy object storage. Both read their body under the connection's
// bandwidth cap.
func (s *Server) serveStorage(w http.ResponseWriter, r *http.Request) {
	conn, _ := r.Context().Value(connKey{}).(*storageConn)
	body := &pacedBody{ReadCloser: r.Body, ctx: r.Context(), s: s, conn: conn}
	r.Body = body
	route, code := RouteStoragePut, 0
	if strings.HasPrefix(r.URL.Path, partsPrefix) {
		route = RoutePartPut
		code = s.partPut(w, r, body)
	} else {
		code = s.storagePut(w, r)
	}
	s.mu.Lock()
	s.count(route, code)
	if conn != nil {
		cs := s.stats.StorageConns[conn.id]
		cs.Bytes += body.read
		cs.Waited += body.waited
		s.stats.StorageConns[conn.id] = cs
	}
	if body.session != "" {
		ss := s.stats.Sessions[body.session]
		ss.BytesReceived += body.read
		s.stats.Sessions[body.session] = ss
	}
	s.mu.Unlock()
	s.log.Debug().Str("route", route).Str("method", r.Method).Int("status", code).Msg("storage request")
}

// storagePut handles one storage request and returns the status it
// answered (0 for a reset connection).
func (s *Server) storagePut(w http.ResponseWriter, r *http.Request) int {
	f := s.noteStorageRequest(r)
	if !sleepCtx(r, f.Latency) {
		return 499
	}

	key, ok := strings.CutPrefix(r.URL.Path, objectsPrefix)
	if !ok || key == "" {
		return s3Error(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	}
	if code := s.refusePut(w, r, key); code != 0 {
		return code
	}
	if code, faulted := s.storageFault(w, r, f); faulted {
		return code
	}

	obj, err := s.store(key, r.Body, r.ContentLength)
	if err != nil {
		s.log.Debug().Err(err).Str("key", key).Msg("upload incomplete")
		return s3Error(w, r, http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.")
	}
	s.keep(key, obj)
	w.Header().Set("ETag", `"`+obj.sha256[:32]+`"`)
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// noteStorageRequest counts r's odd headers and returns the faults in force.
func (s *Server) noteStorageRequest(r *http.Request) Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Header.Get("Authorization") != "" {
		s.stats.StorageAuthHeaders++
	}
	if r.Method == http.MethodPut && r.Header.Get("Content-Type") != "binary/octet-stream" {
		s.stats.StorageOddContentType++
	}
	return s.faults
}

// refusePut answers a request for key that is not a presigned, unexpired
// PUT with a length, returning its status, or returns 0.
func (s *Server) refusePut(w http.ResponseWriter, r *http.Request, key string) int {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		return s3Error(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	}
	if r.Header.Get("Authorization") != "" && s.o.StrictStorageAuth {
		return s3Error(w, r, http.StatusBadRequest, "InvalidArgument", "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
	}
	q := r.URL.Query()
	exp, sig := q.Get("expires"), q.Get("sig")
	expUnix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || sig == "" || !hmac.Equal([]byte(sig), []byte(s.signature(key, exp))) {
		s.bump(func(st *Stats) { st.StorageRefused++ })
		return s3Error(w, r, http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
	}
	if !s.now().Before(time.Unix(expUnix, 0)) {
		s.bump(func(st *Stats) { st.StorageRefused++ })
		return s3Error(w, r, http.StatusForbidden, "AccessDenied", "Request has expired")
	}
	if r.ContentLength < 0 {
		return s3Error(w, r, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.")
	}
	return 0
}

// storageFault rolls f's storage faults for r and, when one comes up,
// answers with it and returns its status (0 for a reset) and true.
func (s *Server) storageFault(w http.ResponseWriter, r *http.Request, f Faults) (int, bool) {
	s.mu.Lock()
	reset := s.roll(f.StorageResetRate)
	slow := !reset && s.roll(f.StorageErrorRate)
	forbid := !reset && !slow && s.roll(f.StorageForbiddenRate)
	var cut int64
	if reset && r.ContentLength > 1 {
		cut = 1 + s.rng.Int64N(r.ContentLength/2)
	}
	if reset || slow || forbid {
		s.stats.Faults++
	}
	if reset {
		s.stats.UploadResets++
	}
	s.mu.Unlock()

	switch {
	case reset:
		io.CopyN(io.Discard, r.Body, cut)
		resetConn(w)
		return 0, true
	case slow:
		return s3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate."), true
	case forbid:
		return s3Error(w, r, http.StatusForbidden, "AccessDenied", "Request has expired"), true
	}
	return 0, false
}

// keep records obj as key's object, replacing (and removing) an earlier one.
func (s *Server) keep(key string, obj *object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.objects[key]; old != nil && old.path != "" && old.path != obj.path {
		os.Remove(old.path)
	}
	s.objects[key] = obj
	s.stats.Uploads++
	s.stats.UploadBytes += obj.size
}

// store streams exactly size bytes of body to a temporary file while
// hashing it, and renames it into place only when complete, so a cut
// upload never becomes an object. Memory use is one copy buffer.
func (s *Server) store(key string, body io.Reader, size int64) (*object, error) {
	h := sha256.New()
	head := &headWriter{}
	var dst io.Writer = io.Discard
	var tmp *os.File
	if !s.o.DiscardObjects {
		var err error
		tmp, err = os.CreateTemp(s.objDir, ".put-*")
		if err != nil {
			return nil, err
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		dst = tmp
	}
	buf := make([]byte, 1<<20)
	n, err := io.CopyBuffer(io.MultiWriter(dst, h, head), io.LimitReader(body, size), buf)
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("got %d of %d bytes", n, size)
	}
	obj := &object{size: n, sha256: hex.EncodeToString(h.Sum(nil)), head: head.b}
	if tmp != nil {
		if err := tmp.Close(); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(key))
		obj.path = filepath.Join(s.objDir, hex.EncodeToString(sum[:16]))
		if err := os.Rename(tmp.Name(), obj.path); err != nil {
			return nil, err
		}
		tmp = nil
	}
	return obj, nil
}

// headWriter keeps the first headLen bytes written to it.
type headWriter struct{ b []byte }

func (h *headWriter) Write(p []byte) (int, error) {
	if n := headLen - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// resetConn drops the connection with a TCP RST, as a storage front end
// that dies mid-upload does.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // not hijackable: abort makes net/http close it
	}
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		if tc, ok := nc.NetConn().(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	conn.Close()
}

// s3Error answers with an S3-style XML error, reading (a bounded part of)
// the body first so that the client gets the answer rather than a broken
// pipe.
func s3Error(w http.ResponseWriter, r *http.Request, code int, s3code, msg string) int {
	if r.ContentLength > drainCap {
		w.Header().Set("Connection", "close")
	}
	io.CopyN(io.Discard, r.Body, drainCap)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(code)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>\n", s3code, msg)
	return code
}

// sleepCtx waits d unless the request is cancelled; false means cancelled.
func sleepCtx(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// bump changes counters under the lock.
func (s *Server) bump(fn func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.stats)
}

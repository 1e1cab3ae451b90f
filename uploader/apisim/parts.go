package apisim

import (
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PartStore is the storage side of v1 upload sessions: the S3 multipart
// operations the API half of the simulator needs. The built-in store serves
// part PUTs on the simulator's own storage listener; Options.PartStore can
// put another in its place (a real S3 server: CreateMultipartUpload,
// presigned UploadPart URLs, ListParts, CompleteMultipartUpload,
// AbortMultipartUpload). The server calls it without holding its lock, so
// methods may do network I/O; they must be safe for concurrent use.
type PartStore interface {
	// Create starts the multipart upload of session uploadID.
	Create(ctx context.Context, uploadID string) error
	// SignPart returns a URL that accepts PUTs of part partNumber until
	// expires: Content-Length required, no Authorization header, answered
	// 200 with the part's quoted ETag.
	SignPart(ctx context.Context, uploadID string, partNumber int, expires time.Time) (string, error)
	// ListParts returns the parts storage holds for uploadID, in ascending
	// part number, each with its ETag exactly as the PUT answered it.
	ListParts(ctx context.Context, uploadID string) ([]Part, error)
	// Complete assembles parts (ascending, already checked by the caller
	// against ListParts) into the session's object. It returns
	// ErrInvalidPart if a part changed since, ErrNoSuchUpload if the upload
	// is gone.
	Complete(ctx context.Context, uploadID string, parts []Part) (ObjectInfo, error)
	// Abort discards the upload and its parts; an unknown id is no error.
	Abort(ctx context.Context, uploadID string) error
}

// Part is one stored part of a multipart upload.
type Part struct {
	Number int
	ETag   string // quoted, as storage answered the PUT
	Size   int64
}

// ObjectInfo describes an assembled object.
type ObjectInfo struct {
	Size int64
	// Hash identifies the content, for counting duplicates. The built-in
	// store gives the object's sha256 (hex); with DiscardObjects, which
	// keeps no bytes to read again, the sha256 of its parts' sha256s
	// (stable for the same content and part size, not the file's sha256).
	Hash string
	// Head is the object's first bytes (up to 8), for the content check.
	Head []byte
}

// Errors of a PartStore.
var (
	ErrNoSuchUpload = errors.New("apisim: no such upload")
	ErrInvalidPart  = errors.New("apisim: invalid part")
)

const partsPrefix = "/parts/"

// localStore is the built-in PartStore: parts are files under
// Dir/parts/<uploadId>/ (or only hashed, with DiscardObjects) and the
// completed object is its parts, read in order.
type localStore struct {
	s   *Server
	dir string // "" with DiscardObjects

	mu      sync.Mutex
	uploads map[string]*localUpload
}

type localUpload struct {
	parts    map[int]*localPart
	complete bool
}

type localPart struct {
	etag   string
	size   int64
	path   string // "" with DiscardObjects
	sha256 []byte // only with DiscardObjects
	head   []byte // part 1 only
}

var _ PartStore = (*localStore)(nil)

func newLocalStore(s *Server) *localStore {
	ls := &localStore{s: s, uploads: map[string]*localUpload{}}
	if !s.o.DiscardObjects {
		ls.dir = filepath.Join(s.dir, "parts")
	}
	return ls
}

func (ls *localStore) Create(_ context.Context, uploadID string) error {
	if ls.dir != "" {
		if err := os.MkdirAll(filepath.Join(ls.dir, uploadID), 0o755); err != nil {
			return err
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.uploads[uploadID] = &localUpload{parts: map[int]*localPart{}}
	return nil
}

// SignPart signs "parts/<uploadId>/<n>" and the expiry with the key of the
// legacy object URLs: the two kinds of URL cannot be swapped, as their
// paths differ.
func (ls *localStore) SignPart(_ context.Context, uploadID string, n int, expires time.Time) (string, error) {
	rest := uploadID + "/" + strconv.Itoa(n)
	exp := strconv.FormatInt(expires.Unix(), 10)
	q := url.Values{"expires": {exp}, "sig": {ls.s.signature("parts/"+rest, exp)}}
	return ls.s.stURL + partsPrefix + rest + "?" + q.Encode(), nil
}

func (ls *localStore) ListParts(_ context.Context, uploadID string) ([]Part, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	u := ls.uploads[uploadID]
	if u == nil || u.complete {
		return nil, ErrNoSuchUpload
	}
	out := make([]Part, 0, len(u.parts))
	for n, p := range u.parts {
		out = append(out, Part{Number: n, ETag: p.etag, Size: p.size})
	}
	slices.SortFunc(out, func(a, b Part) int { return a.Number - b.Number })
	return out, nil
}

func (ls *localStore) Complete(_ context.Context, uploadID string, parts []Part) (ObjectInfo, error) {
	ls.mu.Lock()
	u := ls.uploads[uploadID]
	if u == nil || u.complete {
		ls.mu.Unlock()
		return ObjectInfo{}, ErrNoSuchUpload
	}
	chosen := make([]*localPart, 0, len(parts))
	for _, p := range parts {
		lp := u.parts[p.Number]
		if lp == nil || lp.etag != p.ETag {
			ls.mu.Unlock()
			return ObjectInfo{}, fmt.Errorf("%w: part %d", ErrInvalidPart, p.Number)
		}
		chosen = append(chosen, lp)
	}
	// From here the upload takes no more parts, so the files read below
	// cannot be replaced.
	u.complete = true
	ls.mu.Unlock()

	info := ObjectInfo{}
	if len(chosen) > 0 && chosen[0].head != nil {
		info.Head = chosen[0].head
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for _, lp := range chosen {
		info.Size += lp.size
		if lp.path == "" {
			h.Write(lp.sha256)
			continue
		}
		f, err := os.Open(lp.path)
		if err != nil {
			return ObjectInfo{}, err
		}
		_, err = io.CopyBuffer(h, f, buf)
		f.Close()
		if err != nil {
			return ObjectInfo{}, err
		}
	}
	info.Hash = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

func (ls *localStore) Abort(_ context.Context, uploadID string) error {
	ls.mu.Lock()
	delete(ls.uploads, uploadID)
	ls.mu.Unlock()
	if ls.dir != "" {
		return os.RemoveAll(filepath.Join(ls.dir, uploadID))
	}
	return nil
}

// receive streams exactly size bytes of body into part n of uploadID while
// computing its md5 (the ETag), and records it only when complete, so a cut
// PUT never becomes a part. resent reports that it replaced a part.
func (ls *localStore) receive(uploadID string, n int, body io.Reader, size int64) (etag string, resent bool, err error) {
	ls.mu.Lock()
	u := ls.uploads[uploadID]
	ls.mu.Unlock()
	if u == nil {
		return "", false, ErrNoSuchUpload
	}
	md, sh := md5.New(), sha256.New()
	head := &headWriter{}
	w := []io.Writer{md, head}
	var tmp *os.File
	if ls.dir != "" {
		tmp, err = os.CreateTemp(filepath.Join(ls.dir, uploadID), ".put-*")
		if err != nil {
			return "", false, err
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		w = append(w, tmp)
	} else {
		w = append(w, sh)
	}
	got, err := io.CopyBuffer(io.MultiWriter(w...), io.LimitReader(body, size), make([]byte, 1<<20))
	if err != nil {
		return "", false, err
	}
	if got != size {
		return "", false, fmt.Errorf("got %d of %d bytes", got, size)
	}
	lp := &localPart{etag: `"` + hex.EncodeToString(md.Sum(nil)) + `"`, size: size}
	if n == 1 {
		lp.head = head.b
	}
	if tmp != nil {
		if err := tmp.Close(); err != nil {
			return "", false, err
		}
		lp.path = filepath.Join(ls.dir, uploadID, fmt.Sprintf("%05d", n))
	} else {
		lp.sha256 = sh.Sum(nil)
	}
	if resent, err = ls.record(uploadID, u, n, lp, tmp); err != nil {
		return "", false, err
	}
	tmp = nil // renamed to lp.path, or none
	return lp.etag, resent, nil
}

// record makes lp, received into tmp (nil: in memory), part n of u, still
// uploadID's open upload; resent reports that it replaced a part.
func (ls *localStore) record(uploadID string, u *localUpload, n int, lp *localPart, tmp *os.File) (resent bool, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.uploads[uploadID] != u || u.complete {
		return false, ErrNoSuchUpload
	}
	// Renamed under the lock, so that the file and the record of two
	// PUTs of the same part cannot come from different PUTs.
	if tmp != nil {
		if err := os.Rename(tmp.Name(), lp.path); err != nil {
			return false, err
		}
	}
	resent = u.parts[n] != nil
	u.parts[n] = lp
	return resent, nil
}

// partPut handles a PUT on a signed part URL and returns the status it
// answered (0 for a reset connection). body.session is set as soon as the
// URL names a session, so that every byte read counts to it.
func (s *Server) partPut(w http.ResponseWriter, r *http.Request, body *pacedBody) int {
	s.mu.Lock()
	f := s.faults
	if r.Header.Get("Authorization") != "" {
		s.stats.StorageAuthHeaders++
	}
	s.mu.Unlock()
	if !sleepCtx(r, f.Latency) {
		return 499
	}
	uploadID, n, code := s.checkPartRequest(w, r)
	if code != 0 {
		return code
	}
	body.session = uploadID
	s.mu.Lock()
	u := s.uploads[uploadID]
	open := u != nil && u.accepting(s.now())
	var pf partFault
	if open {
		pf = s.drawPartFault(f, r.ContentLength)
	}
	s.mu.Unlock()
	if !open || s.local == nil {
		return s3Error(w, r, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.")
	}
	if code, done := pf.answer(w, r, f); done {
		return code
	}
	etag, resent, err := s.local.receive(uploadID, n, r.Body, r.ContentLength)
	if errors.Is(err, ErrNoSuchUpload) {
		return s3Error(w, r, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.")
	}
	if err != nil {
		s.log.Debug().Err(err).Str("upload", uploadID).Int("part", n).Msg("part incomplete")
		return s3Error(w, r, http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.")
	}
	s.mu.Lock()
	u.uploading = true
	s.stats.PartPuts++
	s.stats.PartBytes += r.ContentLength
	s.stats.LastPartStored = s.now()
	ss := s.stats.Sessions[uploadID]
	ss.PartPuts++
	ss.PartBytes += r.ContentLength
	if resent {
		ss.PartsResent++
	}
	s.stats.Sessions[uploadID] = ss
	s.mu.Unlock()
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// checkPartRequest checks a part PUT as S3 would before reading its body:
// the path names an upload and a part number, the method, the signature and
// its expiry, a Content-Length. code is the answer sent when it fails.
func (s *Server) checkPartRequest(w http.ResponseWriter, r *http.Request) (uploadID string, n, code int) {
	rest := strings.TrimPrefix(r.URL.Path, partsPrefix)
	uploadID, num, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if uploadID == "" || err != nil || n < 1 || n > maxPartNumber || strconv.Itoa(n) != num {
		return "", 0, s3Error(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	}
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		return "", 0, s3Error(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	}
	if r.Header.Get("Authorization") != "" && s.o.StrictStorageAuth {
		return "", 0, s3Error(w, r, http.StatusBadRequest, "InvalidArgument", "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
	}
	q := r.URL.Query()
	exp, sig := q.Get("expires"), q.Get("sig")
	expUnix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || sig == "" || !hmac.Equal([]byte(sig), []byte(s.signature("parts/"+rest, exp))) {
		s.bump(func(st *Stats) { st.StorageRefused++ })
		return "", 0, s3Error(w, r, http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
	}
	if !s.now().Before(time.Unix(expUnix, 0)) {
		s.bump(func(st *Stats) { st.StorageRefused++ })
		return "", 0, s3Error(w, r, http.StatusForbidden, "AccessDenied", "Request has expired")
	}
	if r.ContentLength < 0 {
		return "", 0, s3Error(w, r, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.")
	}
	return uploadID, n, 0
}

// partFault is the fault drawn for one part PUT, at most one of them.
type partFault struct {
	reset, fail, expired, slow, forbid bool
	cut                                int64 // a reset's bytes read first
}

// drawPartFault draws a part PUT's fault from the knobs (under s.mu).
func (s *Server) drawPartFault(f Faults, length int64) partFault {
	var pf partFault
	pf.reset = s.take(&s.faults.PartResets, f.PartResetRate) || s.roll(f.StorageResetRate)
	pf.fail = !pf.reset && s.take(&s.faults.PartErrors, f.PartErrorRate)
	pf.expired = !pf.reset && !pf.fail && s.take(&s.faults.ExpiredPartURLs, 0)
	pf.slow = !pf.reset && !pf.fail && !pf.expired && s.roll(f.StorageErrorRate)
	pf.forbid = !pf.reset && !pf.fail && !pf.expired && !pf.slow && s.roll(f.StorageForbiddenRate)
	if pf.reset || pf.fail || pf.expired || pf.slow || pf.forbid {
		s.stats.Faults++
	}
	if pf.reset {
		s.stats.PartResets++
		if length > 1 {
			pf.cut = 1 + s.rng.Int64N(length/2)
		}
	}
	return pf
}

// answer sends the fault's answer; done is false when there is none.
func (pf partFault) answer(w http.ResponseWriter, r *http.Request, f Faults) (code int, done bool) {
	switch {
	case pf.reset:
		io.CopyN(io.Discard, r.Body, pf.cut)
		resetConn(w)
		return 0, true
	case pf.fail:
		code := f.partErrorStatus()
		switch code {
		case http.StatusServiceUnavailable:
			return s3Error(w, r, code, "SlowDown", "Please reduce your request rate."), true
		case http.StatusForbidden:
			return s3Error(w, r, code, "AccessDenied", "Access Denied"), true
		default:
			return s3Error(w, r, code, "InternalError", "We encountered an internal error. Please try again."), true
		}
	case pf.slow:
		return s3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate."), true
	case pf.expired || pf.forbid:
		return s3Error(w, r, http.StatusForbidden, "AccessDenied", "Request has expired"), true
	}
	return 0, false
}

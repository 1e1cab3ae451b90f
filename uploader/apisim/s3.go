package apisim

// The S3 storage backend: the simulator's API in front of a real S3 server.
// Why minio-go: see the package comment.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinS3PartSize is S3's smallest part (every part but the last): the
// default and the least partSize of a simulator whose storage is S3.
const MinS3PartSize = 5 << 20

// DefaultS3Region is the region signed into URLs when S3.Region is empty
// (versitygw's and MinIO's default).
const DefaultS3Region = "us-east-1"

// S3 names a real S3 endpoint that takes the place of the simulator's own
// storage: legacy signed URLs are presigned PutObject URLs of the bucket,
// and v1 sessions are multipart uploads of it (see Options.S3).
type S3 struct {
	Endpoint  string // host:port, path-style addressing
	AccessKey string
	SecretKey string
	Bucket    string
	Region    string // default DefaultS3Region
	Secure    bool   // https; plain http is for loopback servers
	// Prefix is put before every object key, so that several simulators
	// can share a bucket. Default: "splatd-sim/<random>/".
	Prefix string
	// Transport carries the simulator's own S3 calls (create, list,
	// complete, read back). Default: a clone of http.DefaultTransport.
	Transport http.RoundTripper
}

// ParseS3URL reads the -storage form s3://KEY:SECRET@HOST:PORT/BUCKET
// (plain http, for a server on this machine) or s3+https://… (TLS). A
// region may follow as ?region=NAME. Key and secret are URL-unescaped.
func ParseS3URL(raw string) (S3, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return S3{}, fmt.Errorf("storage URL: %w", err)
	}
	var c S3
	switch u.Scheme {
	case "s3":
	case "s3+https":
		c.Secure = true
	default:
		return S3{}, fmt.Errorf("storage URL: scheme %q: want s3:// or s3+https://", u.Scheme)
	}
	if u.User == nil || u.User.Username() == "" {
		return S3{}, errors.New("storage URL: no access key (s3://KEY:SECRET@HOST:PORT/BUCKET)")
	}
	c.AccessKey = u.User.Username()
	c.SecretKey, _ = u.User.Password()
	if c.SecretKey == "" {
		return S3{}, errors.New("storage URL: no secret key (s3://KEY:SECRET@HOST:PORT/BUCKET)")
	}
	c.Endpoint = u.Host
	if u.Port() == "" {
		return S3{}, errors.New("storage URL: HOST:PORT wanted")
	}
	c.Bucket = strings.Trim(u.Path, "/")
	if c.Bucket == "" || strings.Contains(c.Bucket, "/") {
		return S3{}, fmt.Errorf("storage URL: want one bucket name as the path, got %q", u.Path)
	}
	c.Region = u.Query().Get("region")
	return c, nil
}

// String is the endpoint and bucket, without the keys.
func (c S3) String() string {
	scheme := "http"
	if c.Secure {
		scheme = "https"
	}
	return scheme + "://" + c.Endpoint + "/" + c.Bucket
}

// s3Store is the storage of a simulator whose Options.S3 is set. It is the
// v1 PartStore (one S3 multipart upload per session, under
// <prefix>v1/<uploadId>) and presigns and reads back the legacy objects
// (under <prefix><storage key>).
type s3Store struct {
	core *minio.Core
	// misregioned signs for another region than the server's, which S3
	// refuses 400 AuthorizationQueryParametersError (Faults.WrongRegionURLs).
	misregioned *minio.Core
	bucket      string
	prefix      string
	now         func() time.Time // the simulator's clock, for URL lifetimes
	// sleep waits for an expired URL to be expired by the real clock.
	sleep func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	uploads map[string]string // session id → S3 upload id
}

var _ PartStore = (*s3Store)(nil)

func newS3Store(c S3, now func() time.Time) (*s3Store, error) {
	if c.Region == "" {
		c.Region = DefaultS3Region
	}
	if c.Prefix == "" {
		c.Prefix = "splatd-sim/" + randomHex(12) + "/"
	}
	tr := c.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	client := func(region string) (*minio.Core, error) {
		core, err := minio.NewCore(c.Endpoint, &minio.Options{
			Creds:     credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
			Secure:    c.Secure,
			Region:    region, // given, so that presigning asks nothing of the server
			Transport: tr,
		})
		if err != nil {
			return nil, fmt.Errorf("apisim: S3 %s: %w", c, err)
		}
		return core, nil
	}
	core, err := client(c.Region)
	if err != nil {
		return nil, err
	}
	other := "eu-west-1"
	if c.Region == other {
		other = "us-west-2"
	}
	misregioned, err := client(other)
	if err != nil {
		return nil, err
	}
	return &s3Store{core: core, misregioned: misregioned, bucket: c.Bucket, prefix: c.Prefix, now: now, sleep: sleep, uploads: map[string]string{}}, nil
}

// urlFault is what is wrong with a URL the simulator hands out on purpose.
type urlFault int

const (
	urlOK          urlFault = iota
	urlExpired              // expired by the time it is handed out
	urlWrongRegion          // signed for another region: S3 answers 400
)

// check makes sure the bucket is there, so that a wrong -storage fails at
// start rather than at the first publish.
func (st *s3Store) check(ctx context.Context) error {
	ok, err := st.core.BucketExists(ctx, st.bucket)
	switch {
	case err != nil:
		return fmt.Errorf("apisim: S3 bucket %q: %w", st.bucket, err)
	case !ok:
		return fmt.Errorf("apisim: S3 bucket %q does not exist", st.bucket)
	}
	return nil
}

// objectKey is the S3 key of a legacy storage key.
func (st *s3Store) objectKey(key string) string { return st.prefix + key }

// sessionKey is the S3 key of a v1 session's object.
func (st *s3Store) sessionKey(uploadID string) string { return st.prefix + "v1/" + uploadID }

// presign returns a presigned PUT of object with query params, valid until
// expires by the simulator's clock. An expires not after now, or
// urlExpired, asks for an expired URL: it is signed for one second and
// returned once S3 must see it as expired, as when a client was slower
// than the URL's life.
func (st *s3Store) presign(ctx context.Context, object string, params url.Values, expires time.Time, fault urlFault) (string, error) {
	life := expires.Sub(st.now()).Truncate(time.Second)
	expired := life <= 0 || fault == urlExpired
	if expired {
		life = time.Second
	}
	signer := st.core
	if fault == urlWrongRegion {
		signer = st.misregioned
	}
	signedAt := time.Now()
	u, err := signer.Presign(ctx, http.MethodPut, st.bucket, object, life, params)
	if err != nil {
		return "", fmt.Errorf("apisim: S3 presign: %w", err)
	}
	if expired {
		// X-Amz-Date has whole seconds: the URL is dead one second after
		// the second it was signed in, plus a margin for S3's comparison.
		dead := signedAt.Truncate(time.Second).Add(life + 100*time.Millisecond)
		if err := st.sleep(ctx, time.Until(dead)); err != nil {
			return "", err
		}
	}
	return u.String(), nil
}

// presignObject is the legacy signed URL of storage key key.
func (st *s3Store) presignObject(ctx context.Context, key string, expires time.Time, fault urlFault) (string, error) {
	return st.presign(ctx, st.objectKey(key), nil, expires, fault)
}

// readObject reads a legacy object back from S3 for its size, sha256 and
// first bytes; nil without error when S3 has no such object.
func (st *s3Store) readObject(ctx context.Context, key string) (*object, error) {
	info, err := st.read(ctx, st.objectKey(key))
	if isS3Code(err, "NoSuchKey") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &object{size: info.Size, sha256: info.Hash, head: info.Head}, nil
}

// read streams object through sha256.
func (st *s3Store) read(ctx context.Context, object string) (ObjectInfo, error) {
	body, _, _, err := st.core.GetObject(ctx, st.bucket, object, minio.GetObjectOptions{})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("apisim: S3 GetObject: %w", err)
	}
	defer body.Close()
	h, head := sha256.New(), &headWriter{}
	n, err := io.CopyBuffer(io.MultiWriter(h, head), body, make([]byte, 1<<20))
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("apisim: S3 GetObject: %w", err)
	}
	return ObjectInfo{Size: n, Hash: hex.EncodeToString(h.Sum(nil)), Head: head.b}, nil
}

func (st *s3Store) Create(ctx context.Context, uploadID string) error {
	id, err := st.core.NewMultipartUpload(ctx, st.bucket, st.sessionKey(uploadID), minio.PutObjectOptions{})
	if err != nil {
		return fmt.Errorf("apisim: S3 CreateMultipartUpload: %w", err)
	}
	st.mu.Lock()
	st.uploads[uploadID] = id
	st.mu.Unlock()
	return nil
}

// s3ID is the S3 upload id of a session.
func (st *s3Store) s3ID(uploadID string) (string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	id, ok := st.uploads[uploadID]
	if !ok {
		return "", ErrNoSuchUpload
	}
	return id, nil
}

// SignPart presigns S3's UploadPart: a PUT of the session's object with
// the partNumber and uploadId query parameters, which the signature covers.
func (st *s3Store) SignPart(ctx context.Context, uploadID string, n int, expires time.Time) (string, error) {
	return st.signPart(ctx, uploadID, n, expires, urlOK)
}

func (st *s3Store) signPart(ctx context.Context, uploadID string, n int, expires time.Time, fault urlFault) (string, error) {
	id, err := st.s3ID(uploadID)
	if err != nil {
		return "", err
	}
	q := url.Values{"partNumber": {strconv.Itoa(n)}, "uploadId": {id}}
	return st.presign(ctx, st.sessionKey(uploadID), q, expires, fault)
}

// ListParts asks S3 (ListParts, every page). minio.Core leaves the ETags
// as S3 wrote them, quotes included, so that they compare equal to what
// the client got from its PUTs.
func (st *s3Store) ListParts(ctx context.Context, uploadID string) ([]Part, error) {
	id, err := st.s3ID(uploadID)
	if err != nil {
		return nil, err
	}
	var out []Part
	marker := 0
	for {
		res, err := st.core.ListObjectParts(ctx, st.bucket, st.sessionKey(uploadID), id, marker, 1000)
		if isS3Code(err, "NoSuchUpload") {
			return nil, ErrNoSuchUpload
		}
		if err != nil {
			return nil, fmt.Errorf("apisim: S3 ListParts: %w", err)
		}
		for _, p := range res.ObjectParts {
			out = append(out, Part{Number: p.PartNumber, ETag: p.ETag, Size: p.Size})
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			return out, nil
		}
		marker = res.NextPartNumberMarker
	}
}

// Complete sends CompleteMultipartUpload with the parts' ETags exactly as
// given, then reads the object back for its sha256.
func (st *s3Store) Complete(ctx context.Context, uploadID string, parts []Part) (ObjectInfo, error) {
	id, err := st.s3ID(uploadID)
	if err != nil {
		return ObjectInfo{}, err
	}
	cp := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cp[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	key := st.sessionKey(uploadID)
	_, err = st.core.CompleteMultipartUpload(ctx, st.bucket, key, id, cp, minio.PutObjectOptions{})
	switch {
	case isS3Code(err, "InvalidPart"), isS3Code(err, "InvalidPartOrder"), isS3Code(err, "EntityTooSmall"):
		return ObjectInfo{}, fmt.Errorf("%w: %v", ErrInvalidPart, err)
	case isS3Code(err, "NoSuchUpload"):
		return ObjectInfo{}, ErrNoSuchUpload
	case err != nil:
		return ObjectInfo{}, fmt.Errorf("apisim: S3 CompleteMultipartUpload: %w", err)
	}
	st.mu.Lock()
	delete(st.uploads, uploadID)
	st.mu.Unlock()
	return st.read(ctx, key)
}

func (st *s3Store) Abort(ctx context.Context, uploadID string) error {
	st.mu.Lock()
	id, ok := st.uploads[uploadID]
	delete(st.uploads, uploadID)
	st.mu.Unlock()
	if !ok {
		return nil
	}
	err := st.core.AbortMultipartUpload(ctx, st.bucket, st.sessionKey(uploadID), id)
	if err != nil && !isS3Code(err, "NoSuchUpload") {
		return fmt.Errorf("apisim: S3 AbortMultipartUpload: %w", err)
	}
	return nil
}

// isS3Code reports an S3 error answer with that code.
func isS3Code(err error, code string) bool {
	var er minio.ErrorResponse
	return errors.As(err, &er) && er.Code == code
}

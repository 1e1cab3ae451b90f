package apisim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Class is a rate-limit class of docs/api-legacy.md's "Limits" table.
type Class string

// The three rate-limit classes.
const (
	ClassNormal Class = "normal"
	ClassStrict Class = "strict"
	ClassAssets Class = "assets"
)

// Defaults applied by New to zero-valued Options fields. The limits are the
// "personal or organization account" column of docs/api-legacy.md.
const (
	DefaultListen          = "127.0.0.1:0"
	DefaultWindow          = time.Minute
	DefaultNormalLimit     = 240
	DefaultStrictLimit     = 10
	DefaultAssetsLimit     = 120
	DefaultProcessingDelay = time.Second
	DefaultURLExpiry       = 15 * time.Minute
	DefaultSuccessStatus   = "completed"
	DefaultUserID          = 1001
	DefaultCheckpointLimit = 20

	DefaultPartSize      = 1 << 20 // small, so that tests make several parts cheaply
	DefaultSessionExpiry = 24 * time.Hour
	DefaultUsername      = "sim-user"
)

// Options configures a Server. The zero value is usable: every field has a
// default, documented on the field.
type Options struct {
	// Listen is the API listen address. Default "127.0.0.1:0" (a free port).
	Listen string
	// StorageListen is the storage listen address. Default: Listen's host
	// with port 0, so storage is always a different origin than the API.
	StorageListen string
	// StorageHost, if set, is the host name put in signed URLs instead of
	// the storage listener's IP (e.g. "localhost", so that the storage host
	// differs from the API host by name and not only by port). It must be
	// covered by the certificate: loopback names always are, see Hosts.
	StorageHost string
	// Hosts are extra DNS names or IPs for the leaf certificate, besides
	// 127.0.0.1, ::1, localhost and the Listen host.
	Hosts []string

	// Dir receives the CA PEM (CAFile) and the stored objects. Empty: a
	// temporary directory created by New and removed by Close.
	Dir string
	// DiscardObjects hashes uploads without writing them to Dir, for
	// benchmarks with multi-GiB files. Object still reports sha256 and size.
	DiscardObjects bool

	// KeepCA keeps the CA in Dir (ca.pem, ca-key.pem): a simulator
	// started again on Dir presents a certificate of the same CA, so the
	// ca_file a daemon was given stays right. False: a new CA every start.
	KeepCA bool

	// Token is the primary valid bearer token. Empty: a random one.
	Token string
	// ExtraTokens are further valid tokens (each gets its own rate-limit
	// windows). SetTokens replaces the whole set at runtime.
	ExtraTokens []string

	// KeyField is the name of the key field in the signed-URL response:
	// "storageKey" (default) or "s3Key" (both in docs/api-legacy.md).
	KeyField string
	// NumericIDs makes splat ids JSON numbers (50) instead of strings ("50").
	NumericIDs bool
	// AltFields uses the other observed spellings of the splat record:
	// release_notes, thumbnails (number) and version as a string.
	AltFields bool
	// StrictStorageAuth makes storage answer 400 to a PUT that carries an
	// Authorization header, as S3 does for presigned URLs. Either way the
	// header is counted in Stats.StorageAuthHeaders.
	StrictStorageAuth bool

	// Window is the fixed rate-limit window. Default 1m. Windows are aligned
	// to whole seconds and their length is rounded up to a whole second, so
	// that the advertised X-RateLimit-Reset (epoch seconds) is exactly the
	// moment the next window opens.
	Window time.Duration
	// Limits per class; missing or non-positive entries take the defaults
	// (normal 240, strict 10, assets 120).
	Limits map[Class]int
	// Classes maps a route (Route* constant) to its class; unlisted routes
	// are ClassNormal, the v1 routes included (docs/api-v1.md documents no
	// limits). Pacing tests set e.g. {RoutePublish: ClassStrict} or
	// {RouteV1CreateUpload: ClassStrict, RouteV1Complete: ClassStrict}.
	Classes map[string]Class

	// ProcessingDelay is the time from publish to the terminal task status.
	// Zero means the default (1s); negative means no delay: the publish
	// response still says "running" but the next GET sees the terminal status.
	ProcessingDelay time.Duration
	// SuccessStatus is the terminal task.status on success. Default "completed".
	SuccessStatus string
	// URLExpiry is the lifetime of a signed URL. Default 15m.
	URLExpiry time.Duration
	// StorageLimit, if positive, is the total bytes of published objects
	// per server; a publish beyond it is a 400 "storage limit exceeded".
	StorageLimit int64

	// Faults are the initial fault settings; see SetFaults.
	Faults Faults
	// Seed makes keys, ids, hashes, checkpoints and fault draws repeatable.
	// Zero: a random seed.
	Seed uint64
	// Branches are seeded branches and their number of checkpoints, e.g.
	// {"main": 123}.
	Branches map[string]int
	// ViewerURL is the base of each splat's viewer link
	// ({ViewerURL}/view?id=<hash>). Default: the simulator's own URL, which
	// serves a small /view page.
	ViewerURL string
	// UserID is the owner id put in splat records (and, as a string, the
	// id of GET /v1/me). Default 1001.
	UserID int64
	// Username is the username of GET /v1/me. Default "sim-user".
	// NullUsername answers null instead, which the contract allows.
	Username     string
	NullUsername bool

	// PartSize is the partSize the server chooses for a v1 session: every
	// part but the last has exactly this size. Default 1 MiB; set it to
	// 5 MiB or more to match S3's minimum. A session whose contentLength
	// would need more than 10000 parts gets the smallest whole number of
	// MiB that fits.
	PartSize int64
	// MaxUploadSize, if positive, is the largest v1 upload accepted: a
	// create with a larger contentLength, or a complete whose parts add up
	// to more, is a 413 "Upload size limit exceeded".
	MaxUploadSize int64
	// SessionExpiry is the life of a v1 session that has not been
	// completed (its expiresAt); after it the session is gone (404) and
	// its parts are discarded. Default 24h.
	SessionExpiry time.Duration
	// SessionSplatID is a generous variant: processing or completed
	// sessions carry the splat's splatId, which the official schema's
	// UploadSession does not have.
	SessionSplatID bool
	// SessionPartSizes is a generous variant: each of a session's
	// uploadedParts carries its size, which the schema makes optional.
	SessionPartSizes bool
	// PartStore, if set, replaces the built-in v1 part store (the part
	// PUTs of the simulator's storage listener), e.g. with a real S3
	// server's multipart API. Part faults, the bandwidth cap and the
	// per-session byte counters only see the built-in store's traffic.
	PartStore PartStore
	// S3, if set, is a real S3 server in place of the simulator's storage for
	// both protocols (excluding PartStore); New checks that the bucket
	// exists. PartSize defaults to MinS3PartSize and may not be smaller. Of
	// the storage faults only ExpiredURLs, ExpiredPartURLs and
	// WrongRegionURLs apply, and the storage counters stay zero.
	S3 *S3
	// StorageBandwidth, if positive, caps the request-body bytes per
	// second that storage reads on each TCP connection (object and part
	// PUTs alike), as S3 throttles single streams. SetStorageBandwidth
	// changes it at runtime.
	StorageBandwidth int64
	// Sleep is how the bandwidth cap waits. Default: a timer that ends
	// early when ctx does. Tests pair a no-op Sleep with a fake Now to
	// measure the cap through Stats.StorageConns without wall-clock time.
	Sleep func(ctx context.Context, d time.Duration) error

	// Now is the clock (tests inject a fake one to expire URLs or roll rate
	// windows without sleeping). Default time.Now.
	Now func() time.Time
	// Logger receives debug lines per request (never the token or a query).
	Logger zerolog.Logger
}

func (o *Options) setDefaults() error {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.StorageListen == "" {
		host, _, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return fmt.Errorf("apisim: Listen %q: %w", o.Listen, err)
		}
		o.StorageListen = net.JoinHostPort(host, "0")
	}
	switch o.KeyField {
	case "":
		o.KeyField = KeyFieldStorageKey
	case KeyFieldStorageKey, KeyFieldS3Key:
	default:
		return fmt.Errorf("apisim: KeyField %q: want %q or %q", o.KeyField, KeyFieldStorageKey, KeyFieldS3Key)
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	limits := map[Class]int{ClassNormal: DefaultNormalLimit, ClassStrict: DefaultStrictLimit, ClassAssets: DefaultAssetsLimit}
	for c, n := range o.Limits {
		if n > 0 {
			limits[c] = n
		}
	}
	o.Limits = limits
	classes := map[string]Class{}
	for r, c := range o.Classes {
		if _, known := limits[c]; !known {
			return fmt.Errorf("apisim: Classes[%q]: unknown class %q", r, c)
		}
		classes[r] = c
	}
	o.Classes = classes
	if o.ProcessingDelay == 0 {
		o.ProcessingDelay = DefaultProcessingDelay
	} else if o.ProcessingDelay < 0 {
		o.ProcessingDelay = 0
	}
	if o.SuccessStatus == "" {
		o.SuccessStatus = DefaultSuccessStatus
	}
	if o.URLExpiry <= 0 {
		o.URLExpiry = DefaultURLExpiry
	}
	if o.UserID == 0 {
		o.UserID = DefaultUserID
	}
	if o.Username == "" {
		o.Username = DefaultUsername
	}
	if o.PartSize < 0 {
		return fmt.Errorf("apisim: PartSize %d: must be positive", o.PartSize)
	}
	if o.S3 != nil {
		if o.PartStore != nil {
			return errors.New("apisim: S3 and PartStore: give one storage")
		}
		if o.PartSize == 0 {
			o.PartSize = MinS3PartSize
		}
		if o.PartSize < MinS3PartSize {
			return fmt.Errorf("apisim: PartSize %d: S3 storage needs at least %d (5 MiB)", o.PartSize, MinS3PartSize)
		}
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.SessionExpiry <= 0 {
		o.SessionExpiry = DefaultSessionExpiry
	}
	if o.StorageBandwidth < 0 {
		return fmt.Errorf("apisim: StorageBandwidth %d: must not be negative", o.StorageBandwidth)
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for name, n := range o.Branches {
		if name == "" || strings.Contains(name, "/") || n < 0 {
			return fmt.Errorf("apisim: Branches[%q]=%d: invalid", name, n)
		}
	}
	return nil
}

// Package apisim is an in-process simulator of the splat publishing API and
// its object storage, written from docs/api-legacy.md and docs/api-v1.md
// alone so that it catches the client's misreadings of the specs.
//
// A Server listens on two loopback TLS ports: the API, serving both protocols
// of one account (a splat made by either is visible to both), and the storage
// its HMAC-signed, expiring URLs point at; Options.S3 puts a real S3 bucket in
// the storage's place (s3.go). Fault knobs inject failures at runtime, and
// counters let tests assert what the client really did.
//
// Where the contract is silent it takes the reading that costs the client
// most (docs/api-v1.md, "The simulator's least generous reading"); a generous
// variant is an option that only a test which says why turns on. Tests,
// benchmarks, `splatd sim` and `splatd demo` use it; production code paths
// never import it.
package apisim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Route names used as keys of Stats.Requests, Options.Classes and
// Faults.ErrorRate. They match the uploader package's route constants so that
// test output reads the same on both sides, but are declared here because
// the simulator must not import the client it is meant to check.
const (
	RouteSignedURL   = "signed_url"  // POST /api/upload/signed-url
	RouteStoragePut  = "storage_put" // PUT {signedUrl} on the storage listener
	RoutePublish     = "publish"     // POST /api/splats/publish
	RouteGetSplat    = "get_splat"   // GET /api/splats/{id}
	RouteCheckpoints = "checkpoints" // GET /api/branches/{branchId}/checkpoints
	RouteOther       = "other"       // anything else (404s, the /view and /scene pages)

	// The SuperSplat API v1 routes, under /api/supersplat.
	RouteV1Me           = "v1_me"            // GET /v1/me
	RouteV1ListSplats   = "v1_splats"        // GET /v1/splats
	RouteV1GetSplat     = "v1_get_splat"     // GET /v1/splats/{splatId}
	RouteV1CreateUpload = "v1_create_upload" // POST /v1/splats/uploads
	RouteV1GetUpload    = "v1_get_upload"    // GET /v1/splats/uploads/{uploadId}
	RouteV1PartURLs     = "v1_part_urls"     // POST /v1/splats/uploads/{uploadId}/part-upload-urls
	RouteV1Complete     = "v1_complete"      // POST /v1/splats/uploads/{uploadId}/complete
	RoutePartPut        = "v1_part_put"      // PUT {part url} on the storage listener
)

// APIRoutes lists the routes of the API listener by their Route* names
// (not storage's, nor RouteOther), for flags that name them.
func APIRoutes() []string {
	return []string{RouteSignedURL, RoutePublish, RouteGetSplat, RouteCheckpoints, RouteV1Me, RouteV1ListSplats,
		RouteV1GetSplat, RouteV1CreateUpload, RouteV1GetUpload, RouteV1PartURLs, RouteV1Complete}
}

// Key field names of the signed-URL response (see docs/api-legacy.md).
const (
	KeyFieldStorageKey = "storageKey"
	KeyFieldS3Key      = "s3Key"
)

// Server is a running simulator. All methods are safe for concurrent use.
type Server struct {
	o       Options
	log     zerolog.Logger
	now     func() time.Time
	dir     string
	tempDir bool // dir was created by New and is removed by Close
	objDir  string
	caFile  string
	pool    *x509.CertPool
	secret  []byte // HMAC key of signed URLs

	apiLn, stLn   net.Listener
	apiSrv, stSrv *http.Server
	apiURL, stURL string
	serveErr      chan error

	mu         sync.Mutex
	rng        *mrand.Rand
	tokens     map[string]bool
	primary    string
	faults     Faults
	limiter    *limiter
	issued     map[string]issuedKey // storage key → issue data
	objects    map[string]*object   // storage key → last completed upload
	splats     []*splat             // in creation order; id = index+1
	byHash     map[string]*splat    // viewer hash → splat
	published  map[string]int       // object sha256 → publishes
	pubBytes   int64
	branches   map[string][]Checkpoint // oldest first
	uploads    map[string]*upload      // v1 session id → session
	byKey      map[string]*upload      // Idempotency-Key → its latest session
	parts      PartStore               // Options.PartStore, s3 or local
	local      *localStore             // the built-in part store; nil if replaced
	s3         *s3Store                // Options.S3's storage; nil without
	bandwidth  atomic.Int64            // StorageBandwidth, changed by SetStorageBandwidth
	connSeq    atomic.Int64            // storage connections accepted
	stats      Stats
	closeOnce  sync.Once
	closeErr   error
	closedChan chan struct{}
}

// New validates o, generates the CA and the leaf certificate, and starts
// both TLS listeners. The server serves until Close (or Run's ctx ends).
func New(o Options) (*Server, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s := newServer(o)
	if err := s.setupDir(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.cleanup()
		}
	}()
	if err := s.openParts(); err != nil {
		return nil, err
	}
	for name, n := range o.Branches {
		s.seedBranch(name, n)
	}

	if err := s.listen(); err != nil {
		return nil, err
	}
	ok = true
	s.log.Info().Str("api", s.apiURL).Str("storage", s.stURL).Str("ca_file", s.caFile).Msg("simulator listening")
	return s, nil
}

// newServer is o's server with its empty state, tokens, secret and random
// source, not yet listening.
func newServer(o Options) *Server {
	s := &Server{
		o:          o,
		log:        o.Logger.With().Str("component", "apisim").Logger(),
		now:        o.Now,
		tokens:     map[string]bool{},
		faults:     o.Faults.clone(),
		issued:     map[string]issuedKey{},
		objects:    map[string]*object{},
		byHash:     map[string]*splat{},
		published:  map[string]int{},
		branches:   map[string][]Checkpoint{},
		uploads:    map[string]*upload{},
		byKey:      map[string]*upload{},
		serveErr:   make(chan error, 2),
		closedChan: make(chan struct{}),
		stats:      newStats(),
	}
	seed := o.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	s.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.limiter = newLimiter(o.Window, o.Limits)

	s.primary = o.Token
	if s.primary == "" {
		s.primary = "sim_" + randomHex(24)
	}
	s.tokens[s.primary] = true
	for _, t := range o.ExtraTokens {
		if t != "" {
			s.tokens[t] = true
		}
	}
	s.secret = []byte(randomHex(32))
	s.bandwidth.Store(o.StorageBandwidth)
	return s
}

func (s *Server) setupDir() error {
	s.dir = s.o.Dir
	if s.dir == "" {
		d, err := os.MkdirTemp("", "splatd-apisim-*")
		if err != nil {
			return fmt.Errorf("apisim: %w", err)
		}
		s.dir, s.tempDir = d, true
	}
	s.objDir = filepath.Join(s.dir, "objects")
	if err := os.MkdirAll(s.objDir, 0o755); err != nil {
		return fmt.Errorf("apisim: %w", err)
	}
	return nil
}

// openParts sets the part store: Options.PartStore, else the S3 store once
// it answers, else the built-in one.
func (s *Server) openParts() error {
	s.parts = s.o.PartStore
	if s.o.S3 != nil {
		st, err := newS3Store(*s.o.S3, s.o.Now)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = st.check(ctx)
		cancel()
		if err != nil {
			return err
		}
		s.s3, s.parts = st, st
	}
	if s.parts == nil {
		s.local = newLocalStore(s)
		s.parts = s.local
	}
	return nil
}

// listen opens both listeners, writes the CA file and starts serving.
func (s *Server) listen() error {
	apiLn, err := net.Listen("tcp", s.o.Listen)
	if err != nil {
		return fmt.Errorf("apisim: listen API: %w", err)
	}
	s.apiLn = apiLn
	stLn, err := net.Listen("tcp", s.o.StorageListen)
	if err != nil {
		return fmt.Errorf("apisim: listen storage: %w", err)
	}
	s.stLn = stLn
	cert, err := s.certificates(s.certHosts())
	if err != nil {
		return err
	}
	s.apiURL = "https://" + urlHost(apiLn.Addr().(*net.TCPAddr), "")
	s.stURL = "https://" + urlHost(stLn.Addr().(*net.TCPAddr), s.o.StorageHost)
	if s.o.ViewerURL == "" {
		s.o.ViewerURL = s.apiURL
	}
	s.o.ViewerURL = strings.TrimRight(s.o.ViewerURL, "/")
	s.serve(cert)
	return nil
}

// certHosts is the names the leaf certificate covers: loopback, Hosts,
// the listen hosts and StorageHost.
func (s *Server) certHosts() []string {
	hosts := append([]string{"127.0.0.1", "::1", "localhost"}, s.o.Hosts...)
	for _, addr := range []string{s.o.Listen, s.o.StorageListen} {
		if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && !isUnspecified(h) {
			hosts = append(hosts, h)
		}
	}
	if s.o.StorageHost != "" {
		hosts = append(hosts, s.o.StorageHost)
	}
	return hosts
}

// certificates makes (or, with KeepCA, reuses) the CA and the leaf for
// hosts, sets s.pool and writes the CA to s.caFile.
func (s *Server) certificates(hosts []string) (tls.Certificate, error) {
	// Certificates use the real clock: a fake test clock must not make
	// TLS verification (which always uses real time) fail.
	certs := newCertificates
	if s.o.KeepCA {
		certs = func(hosts []string, now time.Time) (tls.Certificate, []byte, *x509.CertPool, error) {
			return keptCertificates(s.dir, hosts, now)
		}
	}
	cert, caPEM, pool, err := certs(hosts, time.Now())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("apisim: certificates: %w", err)
	}
	s.pool = pool
	s.caFile = filepath.Join(s.dir, "ca.pem")
	if err := os.WriteFile(s.caFile, caPEM, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("apisim: write CA: %w", err)
	}
	return cert, nil
}

// serve starts the API and storage servers on their listeners with cert;
// each reports its end on s.serveErr.
func (s *Server) serve(cert tls.Certificate) {
	errLog := log.New(logWriter{s.log}, "", 0)
	tlsConf := func() *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	s.apiSrv = &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         tlsConf(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          errLog,
	}
	s.stSrv = &http.Server{
		Handler:           s.StorageHandler(),
		TLSConfig:         tlsConf(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          errLog,
		// HTTP/1.1 only, like S3, and because the reset fault hijacks the
		// connection, which HTTP/2 does not allow.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		// Each connection carries its own bandwidth account.
		ConnContext: s.storageConnContext,
	}
	for _, p := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{s.apiSrv, s.apiLn}, {s.stSrv, s.stLn}} {
		go func() {
			err := p.srv.ServeTLS(p.ln, "", "")
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			s.serveErr <- err
		}()
	}
}

// urlHost formats a listener address for a URL, replacing an unspecified
// address (0.0.0.0, ::) by loopback, which the certificate covers.
func urlHost(a *net.TCPAddr, name string) string {
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	if name != "" {
		host = name
	}
	return net.JoinHostPort(host, fmt.Sprint(a.Port))
}

func isUnspecified(h string) bool {
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// URL is the API base URL, e.g. "https://127.0.0.1:40123" (no trailing slash).
func (s *Server) URL() string { return s.apiURL }

// StorageURL is the storage base URL that signed URLs start with.
func (s *Server) StorageURL() string { return s.stURL }

// CAFile is the path of the PEM file holding the simulator's CA certificate,
// for clients configured with api.ca_file.
func (s *Server) CAFile() string { return s.caFile }

// CertPool returns a pool holding only the simulator's CA, for in-process
// clients (tls.Config.RootCAs).
func (s *Server) CertPool() *x509.CertPool { return s.pool.Clone() }

// Dir is the directory holding the CA file and stored objects.
func (s *Server) Dir() string { return s.dir }

// Client returns an http.Client that trusts the simulator's CA; a
// convenience for tests, not a model for the real client.
func (s *Server) Client() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: s.CertPool(), MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}
}

// Token returns the primary bearer token (the first one given to SetTokens).
func (s *Server) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// SetTokens replaces the set of valid tokens; tests call it to revoke the
// token mid-run (SetTokens() with no argument refuses everyone) and restore
// it later. The first token becomes the primary one returned by Token.
// Rate-limit windows are kept per token across changes.
func (s *Server) SetTokens(tokens ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]bool{}
	for _, t := range tokens {
		if t != "" {
			s.tokens[t] = true
		}
	}
	if len(tokens) > 0 && tokens[0] != "" {
		s.primary = tokens[0]
	}
}

// Run blocks until ctx is done, then closes the server. It returns early
// with the error if a listener fails. `splatd sim` calls New then Run.
func (s *Server) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return s.Close()
	case err := <-s.serveErr:
		cerr := s.Close()
		if err != nil {
			return fmt.Errorf("apisim: serve: %w", err)
		}
		return cerr
	case <-s.closedChan:
		return nil
	}
}

// Close stops both listeners at once (in-flight requests are cut; this is a
// test double, not a service) and removes Dir if New created it. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closedChan)
		var errs []error
		for _, srv := range []*http.Server{s.apiSrv, s.stSrv} {
			if srv != nil {
				if err := srv.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if s.apiSrv == nil && s.apiLn != nil {
			s.apiLn.Close()
		}
		if s.stSrv == nil && s.stLn != nil {
			s.stLn.Close()
		}
		if s.tempDir {
			if err := os.RemoveAll(s.dir); err != nil {
				errs = append(errs, err)
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// cleanup undoes a half-finished New.
func (s *Server) cleanup() {
	if s.apiLn != nil {
		s.apiLn.Close()
	}
	if s.stLn != nil {
		s.stLn.Close()
	}
	if s.tempDir {
		os.RemoveAll(s.dir)
	}
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

// logWriter sends net/http's internal errors (TLS handshake noise from
// clients that hang up) to the debug log instead of stderr.
type logWriter struct{ l zerolog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = logWriter{}

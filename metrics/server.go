package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// shutdownGrace bounds how long Run waits for in-flight scrapes and probes
// once its context is done; they are short, and the daemon's stop budget
// belongs to the uploads.
const shutdownGrace = 5 * time.Second

// ServerOptions configures NewServer.
type ServerOptions struct {
	// Listen is the TCP address, e.g. "127.0.0.1:9464" (metrics.listen).
	// Port 0 picks a free port; Addr reports it.
	Listen string
	// Registry is served on /metrics. It must not be nil.
	Registry *prometheus.Registry
	// Ready reports whether the daemon can make progress (state open,
	// watches active, token not refused); a non-nil error's text is the
	// /readyz body. Nil means always ready.
	Ready func() error
	// Degraded reports what works but needs an operator (failing
	// after-actions): /readyz still answers 200, since publishing goes on
	// and taking the daemon out of rotation would stop it, with the body
	// "degraded: REASON" instead of "ready". Nil means never degraded.
	Degraded func() error
	// Logger receives listen, serve and scrape errors.
	Logger zerolog.Logger

	// Status feeds /api/status, /api/jobs and the status page at /. Nil
	// leaves / a page of links and /api/ unrouted (404).
	Status StatusSource
	// StatusToken returns the bearer token that the status endpoints
	// require when the listener is not a loopback address (see TokenFile
	// for status.token_file). It is called on each such request, so a
	// rotated file applies at once. Nil turns the status endpoints off on
	// a non-loopback listener; on loopback they are always open.
	StatusToken func() (string, error)

	// Act carries out the page's actions (retry, cancel, republish,
	// forget) and returns what happened in the words of the CLI; it must
	// log the action with Action.From. Nil: the page offers none.
	Act func(ctx context.Context, a Action) (string, error)
	// ActionKey is the key every action must carry (ActionKey reads it
	// from ActionKeyFile, in the state directory).
	ActionKey     string
	ActionKeyFile string
	// RemoteActions takes actions from other addresses than loopback
	// (status.remote_actions); they still need the key and the token.
	RemoteActions bool

	// Events, when set, is read for the page's event history.
	Events *EventLog
}

// Server serves /metrics, /healthz and /readyz, and with a StatusSource the
// status endpoints /api/status, /api/jobs and the page at /.
//
// /healthz answers 200 as long as the process can answer at all: it is the
// liveness probe, and restarting a daemon because the API is down or the
// token is wrong would not help. /readyz carries those conditions instead.
type Server struct {
	opts ServerOptions
	srv  *http.Server
	csrf string // the page's CSRF token, one per process

	mu sync.Mutex
	ln net.Listener
	// loopback is set once the listener is bound to a loopback address;
	// until then the status endpoints take the stricter rule.
	loopback atomic.Bool
}

// NewServer returns a server for o; nothing is bound until Listen or Run.
func NewServer(o ServerOptions) *Server {
	s := &Server{opts: o, csrf: newCSRF()}
	mux := http.NewServeMux()
	if o.Status != nil {
		mux.HandleFunc("GET /{$}", s.guard(s.page))
		mux.HandleFunc("GET /api/status", s.guard(s.apiStatus))
		mux.HandleFunc("GET /api/jobs", s.guard(s.apiJobs))
		if o.Act != nil {
			mux.HandleFunc("POST /api/jobs/{id}/{op}", s.guard(s.action))
		}
	} else {
		mux.HandleFunc("GET /{$}", s.index)
	}
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if o.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{
			ErrorLog:      promLogger{o.Logger},
			ErrorHandling: promhttp.ContinueOnError,
			// Registry counts failed scrapes as promhttp_metric_handler_errors_total.
			Registry:          o.Registry,
			EnableOpenMetrics: true,
		}))
	}
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	return s
}

// Listen binds the address. The daemon calls it before starting its other
// components so that a port already in use is reported at once, with a
// clear error, instead of after the first files have been claimed. Run calls
// it when it has not been called.
func (s *Server) Listen() error {
	if s.opts.Registry == nil {
		return errors.New("metrics: ServerOptions.Registry is nil")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("metrics: listen on %q: %w", s.opts.Listen, err)
	}
	s.ln = ln
	s.loopback.Store(isLoopback(ln.Addr()))
	return nil
}

// Close releases a listener that Listen bound when Run will not be called
// (the daemon failed to start after binding it). Run's shutdown closes it
// otherwise.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		_ = s.ln.Close()
	}
}

// Addr is the bound address, or "" before Listen.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// logServing is the start line: where the endpoints are, the status page
// first (its address as a link), and who may read it.
func (s *Server) logServing(addr net.Addr) {
	l := s.opts.Logger.Info().Str("addr", addr.String())
	if s.opts.Status == nil {
		l.Msg("serving /metrics, /healthz, /readyz")
		return
	}
	host := "localhost"
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		host = ta.IP.String()
	}
	l = l.Str("status_page", "http://"+net.JoinHostPort(host, portString(addr))+"/")
	switch {
	case s.loopback.Load():
		l = l.Str("status", "open (loopback)")
	case s.opts.StatusToken != nil:
		l = l.Str("status", "bearer token required (status.token_file)")
	default:
		l = l.Str("status", "off (not loopback and no status.token_file)")
	}
	l.Msg("serving /metrics, /healthz, /readyz, the status page / and /api/status, /api/jobs")
}

func portString(addr net.Addr) string {
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	return port
}

// Run serves until ctx is done, then shuts down gracefully and returns nil.
// A listen error is returned at once.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	s.logServing(ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()

	select {
	case err := <-errc:
		// Serve only returns on its own for a broken listener.
		return fmt.Errorf("metrics: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", serr)
	}
	if err != nil {
		// Probes that outlive the grace period are cut off; that is not
		// worth failing the daemon's shutdown for.
		s.opts.Logger.Warn().Err(err).Msg("shutdown of the metrics server cut connections")
		_ = s.srv.Close()
	}
	return nil
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, `<html><head><title>splatd</title></head><body><h1>splatd</h1>
<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p></body></html>
`)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	if s.opts.Degraded != nil {
		if err := s.opts.Degraded(); err != nil {
			fmt.Fprintf(w, "degraded: %v\n", err)
			return
		}
	}
	fmt.Fprintln(w, "ready")
}

// promLogger adapts zerolog to promhttp's error log.
type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error().Msg(fmt.Sprint(v...))
}

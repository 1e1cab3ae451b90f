package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// SetRootCAs makes the API and storage connections verify servers against
// roots (nil: the system's) from now on: a reloaded api.ca_file. Requests
// in flight finish on their connections; idle ones are closed.
func (c *Client) SetRootCAs(roots *x509.CertPool) {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	oldAPI := c.api.Swap(&http.Client{Transport: apiTransport(dialer, roots), CheckRedirect: c.checkAPIRedirect})
	oldStorage := c.storage.Swap(&http.Client{
		Transport: storageTransport(dialer, roots, c.timeout),
		// A streamed body cannot be replayed, and a redirect could lead the
		// upload anywhere: hand any 3xx back as an APIError.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	})
	for _, h := range []*http.Client{oldAPI, oldStorage} {
		if h != nil {
			h.CloseIdleConnections()
		}
	}
}

// parseBaseURL checks the API base URL and returns it normalised: https,
// no trailing slash.
func parseBaseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("uploader: API base URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("uploader: API base URL %q is not a URL", state.RedactURL(raw))
	}
	if !strings.EqualFold(u.Scheme, "https") {
		return nil, fmt.Errorf("uploader: API base URL scheme %q is not allowed: only https is accepted", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("uploader: API base URL %q has no host", state.RedactURL(raw))
	}
	if u.User != nil {
		return nil, errors.New("uploader: API base URL must not carry credentials; use the token")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("uploader: API base URL must not have a query or fragment")
	}
	u.Scheme = "https"
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// apiTransport is the API calls' transport: HTTP/2 when the server offers it.
func apiTransport(dialer *net.Dialer, roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   idleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// storageTransport is the storage PUTs' own transport: HTTP/1.1 (one TCP
// stream per upload, like S3 clients; Go's HTTP/2 flow control caps upload
// throughput), a larger write buffer for fewer TLS records, and a
// response-header timeout instead of an overall one, because the body may
// take hours.
func storageTransport(dialer *net.Dialer, roots *x509.CertPool, timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   idleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		WriteBufferSize:       128 << 10,
	}
}

// checkAPIRedirect follows a redirect only within the API's origin (scheme,
// host and port): Go drops Authorization on a cross-host redirect but would
// still send the request, and a downgrade or another port is not our API.
// A refused redirect comes back to checkResponse as the 3xx itself.
func (c *Client) checkAPIRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects || !c.sameOrigin(req.URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// sameOrigin reports whether u has the base URL's scheme, host and port.
func (c *Client) sameOrigin(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, c.baseURL.Scheme) &&
		strings.EqualFold(u.Hostname(), c.baseURL.Hostname()) &&
		originPort(u) == originPort(c.baseURL)
}

func originPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "http") {
		return "80"
	}
	return "443"
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

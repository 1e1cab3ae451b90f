package config

import (
	"net/url"
	"strings"
)

// publicAPIHost and publicViewerHost are the public service's API host and
// the host of the viewer links it answers with (superspl.at/scene/<id>).
const (
	publicAPIHost    = "playcanvas.com"
	publicViewerHost = "superspl.at"
)

// viewerHosts is the set of hosts a viewer link may point to: the
// api.viewer_hosts entries, or when there are none the host of
// api.base_url (with its port) and, for the public service, superspl.at.
func (c *Config) ViewerHosts() []string {
	if len(c.API.ViewerHosts) > 0 {
		return c.API.ViewerHosts
	}
	u, err := url.Parse(c.API.BaseURL)
	if err != nil || u.Host == "" {
		return nil
	}
	hosts := []string{u.Host}
	if strings.EqualFold(u.Hostname(), publicAPIHost) {
		hosts = append(hosts, publicViewerHost)
	}
	return hosts
}

// trustedViewerURL returns raw if it is an https link to one of the API's
// viewer hosts (viewerHosts), "" otherwise. A link read from a receipt in a
// watch folder (an adopted file) is whatever the folder's writer chose: it
// is never stored, shown or sent on unless it passes.
func (c *Config) TrustedViewerURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Opaque != "" {
		return ""
	}
	for _, h := range c.ViewerHosts() {
		if strings.EqualFold(h, u.Host) || (!strings.Contains(h, ":") && u.Port() == "" && strings.EqualFold(h, u.Hostname())) {
			return raw
		}
	}
	return ""
}

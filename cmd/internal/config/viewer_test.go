package config

import (
	"testing"
)

func TestTrustedViewerURL(t *testing.T) {
	t.Parallel()
	public := &Config{API: API{BaseURL: "https://playcanvas.com"}}
	sim := &Config{API: API{BaseURL: "https://127.0.0.1:8443"}}
	own := &Config{API: API{BaseURL: "https://playcanvas.com", ViewerHosts: []string{"viewer.studio.example"}}}
	for _, tc := range []struct {
		cfg  *Config
		url  string
		keep bool
	}{
		{public, "https://superspl.at/scene/abc", true},
		{public, "https://playcanvas.com/view?id=abc", true},
		{public, "https://SUPERSPL.AT/view?id=abc", true},
		{public, "https://evil.example/view?id=abc", false},
		{public, "https://superspl.at.evil.example/x", false},
		{public, "https://superspl.at:8443/x", false},
		{public, "http://superspl.at/scene/abc", false},
		{public, "javascript:alert(1)", false},
		{public, "https://user@superspl.at/x", false},
		{sim, "https://127.0.0.1:8443/view?id=abc", true},
		{sim, "https://127.0.0.1:9999/view?id=abc", false},
		{own, "https://viewer.studio.example/v/1", true},
		{own, "https://superspl.at/scene/abc", false},
	} {
		got := tc.cfg.TrustedViewerURL(tc.url)
		if (got != "") != tc.keep || (tc.keep && got != tc.url) {
			t.Errorf("base %s hosts %v: %q → %q, keep=%v", tc.cfg.API.BaseURL, tc.cfg.API.ViewerHosts, tc.url, got, tc.keep)
		}
	}
}

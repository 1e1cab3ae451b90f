package state

import (
	"net/url"
	"slices"
	"testing"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"https://s.example/b/k?X-Amz-Signature=abc", "https://s.example/b/k?REDACTED"},
		{"https://user:pw@s.example/b/k", "https://s.example/b/k"},
		{"https://s.example/b/k", "https://s.example/b/k"},
		{"https://s.example/b/k#frag", "https://s.example/b/k?REDACTED"},
		{"https://s.example/b/k?", "https://s.example/b/k?REDACTED"},
		{"::not a url?sig=1", "::not a url?REDACTED"},
		{"::not a url@host", "::not a url?REDACTED"},
	}
	for _, tc := range tests {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestURLOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"https://hooks.example/services/T0/B0/secret", "https://hooks.example/…"},
		{"https://hooks.example/?k=secret", "https://hooks.example/…"},
		{"https://hooks.example/", "https://hooks.example"},
		{"http://127.0.0.1:9/", "http://127.0.0.1:9"},
		{"not a url", "(unparsable URL)"},
	}
	for _, tc := range tests {
		if got := URLOrigin(tc.in); got != tc.want {
			t.Errorf("URLOrigin(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		secrets []string
		want    string
	}{
		{"", nil, ""},
		{"token refused by the API", nil, "token refused by the API"},
		{"PUT https://s.example/k?sig=abc: EOF", nil, "PUT https://s.example/k?REDACTED: EOF"},
		{"see https://u:p@s.example/k for details", nil, "see https://s.example/k for details"},
		{"https://s.example/k#frag", nil, "https://s.example/k?REDACTED"},
		{"query X-Amz-Signature=abc&X-Amz-Date=20250101 sent", nil, "query X-Amz-Signature=REDACTED&X-Amz-Date=REDACTED sent"},
		{"sas se=2025&sp=rw&sig=zzz", nil, "sas se=REDACTED&sp=REDACTED&sig=REDACTED"},
		{"Authorization: Bearer abc.def-ghi", nil, "Authorization: Bearer REDACTED"},
		{"case=1 phase=2", nil, "case=1 phase=2"},
		{"see https://s.example/x?sig=abc, and tok123456 too", []string{"tok123456"}, "see https://s.example/x?REDACTED, and REDACTED too"},
		// Short secrets would eat ordinary words; the longest goes first.
		{"abc a=verylongvalue1&b=2", []string{"abc", "a=verylongvalue1&b=2", "verylongvalue1"}, "abc REDACTED"},
	}
	for _, tc := range tests {
		if got := ScrubText(tc.in, tc.secrets...); got != tc.want {
			t.Errorf("ScrubText(%q, %q) = %q, want %q", tc.in, tc.secrets, got, tc.want)
		}
	}
}

func TestURLSecrets(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("https://me:hunter22@s.example/k?X-Amz-Signature=abcdef0123&n=1")
	got := URLSecrets(u)
	for _, want := range []string{"X-Amz-Signature=abcdef0123&n=1", "abcdef0123", "hunter22"} {
		if !slices.Contains(got, want) {
			t.Errorf("URLSecrets = %q, missing %q", got, want)
		}
	}
	if slices.Contains(got, "1") {
		t.Errorf("URLSecrets = %q: a short value is no secret", got)
	}
	if URLSecrets(nil) != nil {
		t.Error("URLSecrets(nil) != nil")
	}
}

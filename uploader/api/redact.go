package api

import (
	"errors"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// A signed URL carries its credential in the query string (an S3-style
// presigned URL's X-Amz-Signature, X-Amz-Credential, ...). Anyone who reads a
// log line holding it can overwrite the object until it expires, so no error
// text or log line of this package may carry a query string, userinfo, or the
// bearer token. The helpers below are the single place that scrubs them.

// redactedMark replaces a removed query string or secret.
const redactedMark = "REDACTED"

// redactURL returns raw without userinfo, query and fragment. A removed
// query is shown as "?REDACTED" so a reader can tell the URL was signed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.IndexAny(raw, "?#"); i >= 0 {
			return raw[:i] + "?" + redactedMark
		}
		return raw
	}
	had := u.RawQuery != "" || u.ForceQuery || u.Fragment != ""
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	if had {
		s += "?" + redactedMark
	}
	return s
}

// urlInText matches URLs with a query inside free text (server messages
// sometimes echo the URL they refused).
var urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>?]*\?[^\s"'<>]*`)

// urlSecrets lists the parts of u that must never appear in text: the
// raw query, its values (raw and decoded, when long enough to be a secret
// rather than a common word) and the userinfo password.
func urlSecrets(u *url.URL) []string {
	if u == nil {
		return nil
	}
	var out []string
	if u.RawQuery != "" {
		out = append(out, u.RawQuery)
		if dec, err := url.QueryUnescape(u.RawQuery); err == nil {
			out = append(out, dec)
		}
		for _, kv := range strings.Split(u.RawQuery, "&") {
			_, v, _ := strings.Cut(kv, "=")
			if len(v) >= 8 {
				out = append(out, v)
				if dec, err := url.QueryUnescape(v); err == nil {
					out = append(out, dec)
				}
			}
		}
	}
	if p, ok := u.User.Password(); ok && p != "" {
		out = append(out, p)
	}
	return out
}

// scrub removes every secret and every URL query from text.
func scrub(text string, secrets []string) string {
	ss := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if len(s) >= 4 {
			ss = append(ss, s)
		}
	}
	// Longest first, so a value inside the whole query does not leave the
	// rest of the query behind.
	sort.Slice(ss, func(i, j int) bool { return len(ss[i]) > len(ss[j]) })
	for _, s := range ss {
		text = strings.ReplaceAll(text, s, redactedMark)
	}
	return urlInText.ReplaceAllStringFunc(text, redactURL)
}

// wrapNetErr wraps a transport error for route: *url.Error's URL is
// scrubbed in place (so errors.As callers see the scrubbed URL too) and the
// text is scrubbed of secrets.
func wrapNetErr(route string, err error, secrets []string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactURL(ue.URL)
	}
	return &netError{route: route, text: scrub(err.Error(), secrets), err: err}
}

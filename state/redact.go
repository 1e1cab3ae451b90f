package state

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Redaction is one rule for the whole program: a presigned URL's query (its
// credential), a URL's userinfo and the token are removed from every text a
// job stores, a log line prints or the status page shows. The API client
// scrubs its errors as it makes them; the status endpoints scrub again
// before a text leaves the process.

// RedactedMark replaces what was removed, so a reader can tell something was.
const RedactedMark = "REDACTED"

var (
	// urlInText matches a URL inside free text.
	urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>]+`)
	// signedParamInText matches query parameters that carry a credential in
	// S3, GCS, CloudFront and Azure signed URLs, and token parameters, where
	// they appear outside a whole URL (a quoted query string, say).
	signedParamInText = regexp.MustCompile(`(?i)\b(x-amz-[a-z0-9-]*|x-goog-[a-z0-9-]*|signature|sig|se|sp|sv|policy|key-pair-id|googleaccessid|awsaccesskeyid|expires|token|access_token|id_token|api_key|apikey)=[^\s&"'<>]+`)
	// bearerInText matches a bearer credential as an Authorization header
	// carries it.
	bearerInText = regexp.MustCompile(`(?i)\bbearer\s+[^\s"'<>,;]+`)
)

// RedactURL returns raw without userinfo, query and fragment; a removed
// query or fragment shows as "?REDACTED".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: keep only what precedes anything that could be a
		// credential.
		if i := strings.IndexAny(raw, "?#@"); i >= 0 {
			return raw[:i] + "?" + RedactedMark
		}
		return raw
	}
	had := u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != ""
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	if had {
		s += "?" + RedactedMark
	}
	return s
}

// URLOrigin keeps only a URL's scheme and host, with "/…" when it had a
// path or query: for URLs whose path is itself the secret (a chat
// service's incoming webhook).
func URLOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	r := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		r += "/…"
	}
	return r
}

// URLSecrets lists the parts of u that must never appear in text: the raw
// query, its values (raw and decoded, when long enough to be a secret rather
// than a common word) and the userinfo password. ScrubText takes them.
func URLSecrets(u *url.URL) []string {
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

// ScrubText removes from text every given secret (the token, a signed URL's
// query: values shorter than 4 bytes are ignored, they would eat ordinary
// words), then every URL's userinfo, query and fragment, signed-URL
// parameters outside a URL and bearer credentials.
func ScrubText(text string, secrets ...string) string {
	if text == "" {
		return ""
	}
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
		text = strings.ReplaceAll(text, s, RedactedMark)
	}
	text = urlInText.ReplaceAllStringFunc(text, func(m string) string {
		// Punctuation that ends a sentence or a "PUT <url>: status" prefix
		// belongs to the text, not to the URL.
		u := strings.TrimRight(m, ".,:;!)]}")
		return RedactURL(u) + m[len(u):]
	})
	text = signedParamInText.ReplaceAllString(text, "${1}="+RedactedMark)
	return bearerInText.ReplaceAllString(text, "Bearer "+RedactedMark)
}

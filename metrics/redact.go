package metrics

import (
	"net/url"
	"regexp"
	"strings"
)

// The status endpoints show free texts that came from servers (a job's last
// error, its fail reason, token advice). Storage servers echo the URL they
// refused, and a presigned URL's query is its credential: anyone holding it
// can overwrite the object until it expires. The daemon scrubs its errors
// already; these functions scrub them again at the last moment before they
// leave the process, because a leak here reaches every browser that opens
// the page.

// redactedMark replaces what was removed.
const redactedMark = "REDACTED"

var (
	// urlInText matches a URL inside free text.
	urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>]+`)
	// signedParamInText matches query parameters that carry a credential in
	// S3, GCS, CloudFront and Azure signed URLs, and token parameters, where
	// they appear outside a whole URL (e.g. a quoted query string).
	signedParamInText = regexp.MustCompile(`(?i)\b(x-amz-[a-z0-9-]*|x-goog-[a-z0-9-]*|signature|sig|se|sp|sv|policy|key-pair-id|googleaccessid|awsaccesskeyid|expires|token|access_token|id_token|api_key|apikey)=[^\s&"'<>]+`)
	// bearerInText matches a bearer credential as an Authorization header
	// would carry it.
	bearerInText = regexp.MustCompile(`(?i)\bbearer\s+[^\s"'<>,;]+`)
)

// scrub removes URL queries, fragments and userinfo, signed-URL parameters
// and bearer credentials from text.
func scrub(text string) string {
	if text == "" {
		return ""
	}
	text = urlInText.ReplaceAllStringFunc(text, func(m string) string {
		// Punctuation that ends a sentence or a "PUT <url>: status" prefix
		// belongs to the text, not to the URL.
		u := strings.TrimRight(m, ".,:;!)]}")
		return redactURL(u) + m[len(u):]
	})
	text = signedParamInText.ReplaceAllString(text, "${1}="+redactedMark)
	return bearerInText.ReplaceAllString(text, "Bearer "+redactedMark)
}

// redactURL returns raw without userinfo, query and fragment; a removed
// query or fragment shows as "?REDACTED" so a reader can tell it was there.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: keep only what precedes anything that could be a
		// credential.
		if i := strings.IndexAny(raw, "?#@"); i >= 0 {
			return raw[:i] + "?" + redactedMark
		}
		return raw
	}
	had := u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != ""
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	if had {
		s += "?" + redactedMark
	}
	return s
}

// viewerIDParam is the one query parameter a viewer link needs: legacy links
// are {viewer_url}/view?id=<hash>, and the hash is public by design.
var viewerIDParam = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// viewerLink reduces raw to an http(s) link that opens the scene: no
// userinfo, no fragment, and of the query only a plausible id. Anything else
// (another scheme such as javascript:, no host, a bad id) gives "" so that
// the page shows no link rather than a dangerous or leaking one.
func viewerLink(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return ""
	}
	q := u.Query()
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	u.RawQuery, u.ForceQuery = "", false
	if ids := q["id"]; len(ids) == 1 && viewerIDParam.MatchString(ids[0]) {
		u.RawQuery = url.Values{"id": ids}.Encode()
	}
	return u.String()
}

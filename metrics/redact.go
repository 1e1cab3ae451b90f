package metrics

import (
	"net/url"
	"regexp"
)

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

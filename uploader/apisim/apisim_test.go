package apisim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewDefaultsAndTLS(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	if !strings.HasPrefix(s.URL(), "https://127.0.0.1:") || !strings.HasPrefix(s.StorageURL(), "https://127.0.0.1:") {
		t.Fatalf("URLs %q %q", s.URL(), s.StorageURL())
	}
	if s.URL() == s.StorageURL() {
		t.Fatal("storage must be a different origin than the API")
	}
	if len(s.Token()) < 16 {
		t.Fatalf("generated token %q too short", s.Token())
	}
	// The PEM file alone must be enough for a client, as api.ca_file is.
	pem, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	for _, base := range []string{s.URL(), s.StorageURL(), strings.Replace(s.URL(), "127.0.0.1", "localhost", 1)} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		resp, err := (&http.Client{Transport: tr}).Get(base + "/nothing")
		if err != nil {
			t.Fatalf("GET %s with the CA file: %v", base, err)
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
	// Without the CA the handshake must fail.
	resp, err := http.Get(s.URL() + "/api/splats/1")
	if err == nil {
		resp.Body.Close()
		t.Fatal("request without the simulator's CA succeeded")
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{KeyField: "key"},
		{Classes: map[string]Class{RoutePublish: "vip"}},
		{Listen: "no-port"},
		{Branches: map[string]int{"a/b": 3}},
	} {
		if s, err := New(o); err == nil {
			s.Close()
			t.Errorf("New(%+v) succeeded, want an error", o)
		}
	}
}

func TestRunReturnsOnCancelAndRemovesTempDir(t *testing.T) {
	t.Parallel()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp dir %s still there: %v", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDirIsKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newSim(t, Options{Dir: dir})
	c := newClient(t, s)
	key := c.upload("a.ply", plyBytes(100))
	if s.CAFile() != dir+"/ca.pem" {
		t.Fatalf("CAFile %q", s.CAFile())
	}
	ents, err := os.ReadDir(dir + "/objects")
	if err != nil || len(ents) != 1 {
		t.Fatalf("objects dir: %v %v", ents, err)
	}
	if _, _, ok := s.Object(key); !ok {
		t.Fatal("object not recorded")
	}
}

func TestSignedURLErrors(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	c := newClient(t, s)
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"missing", map[string]string{}, "fileName is required"},
		{"empty", map[string]string{"fileName": " "}, "fileName is required"},
		{"old spelling", map[string]string{"filename": "a.ply"}, "fileName is required"},
		{"not json", "{", "invalid JSON"},
	} {
		r := c.do("POST", "/api/upload/signed-url", tc.body)
		if r.code != 400 || !strings.Contains(r.errorText(t), tc.want) {
			t.Errorf("%s: %d %s, want 400 %q", tc.name, r.code, r.body, tc.want)
		}
	}
	// A form body is refused: the spec requires JSON.
	req, _ := http.NewRequest("POST", s.URL()+"/api/upload/signed-url", strings.NewReader("fileName=a.ply"))
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if r := c.send(req); r.code != 400 {
		t.Errorf("form body: %d", r.code)
	}
	if r := c.do("GET", "/api/upload/signed-url", nil); r.code != 405 || r.header.Get("Allow") != "POST" {
		t.Errorf("GET: %d Allow=%q", r.code, r.header.Get("Allow"))
	} else {
		r.errorText(t)
	}
	if r := c.do("GET", "/api/nope", nil); r.code != 404 {
		t.Errorf("unknown route: %d", r.code)
	}
	st := s.Stats()
	if st.Count(RouteSignedURL, 400) != 5 || st.Count(RouteSignedURL, 405) != 1 || st.Count(RouteOther, 404) != 1 {
		t.Errorf("request counts %v", st.Requests)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{Token: "primary", ExtraTokens: []string{"second"}})
	c := newClient(t, s)
	for _, tok := range []string{"", "wrong"} {
		c.token = tok
		r := c.do("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"})
		if r.code != 401 || r.errorText(t) != "Unauthorized" {
			t.Errorf("token %q: %d %s", tok, r.code, r.body)
		}
		if r.header.Get("X-RateLimit-Limit") == "" {
			t.Errorf("401 without rate-limit headers")
		}
	}
	c.token = "second"
	if r := c.do("GET", "/api/splats/1", nil); r.code != 404 {
		t.Errorf("extra token: %d", r.code)
	}
	// Revoke everything, then restore a new primary.
	s.SetTokens()
	c.token = "primary"
	if r := c.do("GET", "/api/splats/1", nil); r.code != 401 {
		t.Errorf("revoked token: %d", r.code)
	}
	s.SetTokens("restored")
	if s.Token() != "restored" {
		t.Errorf("Token() = %q", s.Token())
	}
	c.token = "restored"
	if r := c.do("GET", "/api/splats/1", nil); r.code != 404 {
		t.Errorf("restored token: %d", r.code)
	}
	if st := s.Stats(); st.Unauthorized != 3 {
		t.Errorf("Unauthorized = %d, want 3", st.Unauthorized)
	}
}

func TestUploadAndStorage(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{Now: clk.Now, URLExpiry: time.Minute})
	c := newClient(t, s)
	data := plyBytes(3 << 20)

	u, key := c.signedURL("my scan (1).ply")
	if !strings.HasPrefix(u, s.StorageURL()+"/objects/") {
		t.Fatalf("signed URL %q not on storage", u)
	}
	if strings.ContainsAny(key, " ()") {
		t.Errorf("key %q not sanitized", key)
	}
	r, err := c.put(u, data)
	if err != nil || r.code != 200 || r.header.Get("ETag") == "" {
		t.Fatalf("PUT: %v %d %s etag=%q", err, r.code, r.body, r.header.Get("ETag"))
	}
	gotSHA, size, ok := s.Object(key)
	if !ok || gotSHA != sha(data) || size != int64(len(data)) {
		t.Fatalf("Object = %s %d %v, want %s %d", gotSHA, size, ok, sha(data), len(data))
	}

	pu, _ := url.Parse(u)
	tamper := func(f func(q url.Values)) string {
		q := pu.Query()
		f(q)
		v := *pu
		v.RawQuery = q.Encode()
		return v.String()
	}
	for name, bad := range map[string]string{
		"bad sig":       tamper(func(q url.Values) { q.Set("sig", strings.Repeat("0", 64)) }),
		"moved expiry":  tamper(func(q url.Values) { q.Set("expires", "99999999999") }),
		"no signature":  tamper(func(q url.Values) { q.Del("sig") }),
		"other key":     strings.Replace(u, "/objects/uploads/", "/objects/uploads/x", 1),
		"no query":      strings.SplitN(u, "?", 2)[0],
		"not an object": s.StorageURL() + "/elsewhere",
	} {
		r, err := c.put(bad, []byte("ply\nx"))
		want := 403
		if name == "not an object" {
			want = 404
		}
		if err != nil || r.code != want || !strings.Contains(string(r.body), "<Error><Code>") {
			t.Errorf("%s: %v %d %s", name, err, r.code, r.body)
		}
	}

	// Expiry: the URL works until URLExpiry, then storage refuses it.
	clk.Add(59 * time.Second)
	if r, err := c.put(u, data[:10]); err != nil || r.code != 200 {
		t.Errorf("PUT before expiry: %v %d", err, r.code)
	}
	clk.Add(time.Second)
	if r, err := c.put(u, data); err != nil || r.code != 403 || !strings.Contains(string(r.body), "expired") {
		t.Errorf("PUT after expiry: %v %d %s", err, r.code, r.body)
	}
	if _, size, _ := s.Object(key); size != 10 {
		t.Errorf("re-upload did not replace the object: size %d", size)
	}

	// No Content-Length (chunked) → 411; a GET → 405.
	u2, _ := c.signedURL("b.ply")
	req, _ := http.NewRequest("PUT", u2, io.NopCloser(strings.NewReader("ply\nabc")))
	if r := c.send(req); r.code != 411 {
		t.Errorf("chunked PUT: %d %s", r.code, r.body)
	}
	req, _ = http.NewRequest("GET", u2, nil)
	if r := c.send(req); r.code != 405 {
		t.Errorf("GET object: %d", r.code)
	}

	// An Authorization header sent to storage is counted (and accepted).
	req, _ = http.NewRequest("PUT", u2, strings.NewReader("ply\nabc"))
	req.Header.Set("Authorization", "Bearer "+s.Token())
	if r := c.send(req); r.code != 200 {
		t.Errorf("PUT with auth header: %d", r.code)
	}
	st := s.Stats()
	// The chunked and the auth-header PUTs above sent no Content-Type.
	if st.StorageOddContentType != 2 {
		t.Errorf("StorageOddContentType %d, want 2", st.StorageOddContentType)
	}
	if st.StorageAuthHeaders != 1 || st.Uploads != 3 || st.UploadBytes != int64(len(data)+10+7) || st.StorageRefused != 6 {
		t.Errorf("stats %+v", st)
	}
	if st.Count(RouteStoragePut, 200) != 3 || st.Count(RouteStoragePut, 403) != 6 {
		t.Errorf("storage requests %v", st.Requests[RouteStoragePut])
	}
}

func TestStrictStorageAuth(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{StrictStorageAuth: true, StorageHost: "localhost"})
	c := newClient(t, s)
	u, _ := c.signedURL("a.ply")
	if !strings.HasPrefix(u, "https://localhost:") {
		t.Fatalf("StorageHost not used: %q", u)
	}
	req, _ := http.NewRequest("PUT", u, strings.NewReader("ply\n"))
	req.Header.Set("Authorization", "Bearer x")
	if r := c.send(req); r.code != 400 {
		t.Errorf("PUT with auth: %d", r.code)
	}
	if s.Stats().StorageAuthHeaders != 1 {
		t.Error("auth header not counted")
	}
}

func TestDiscardObjects(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{DiscardObjects: true})
	c := newClient(t, s)
	data := plyBytes(1000)
	key := c.upload("a.ply", data)
	if got, _, _ := s.Object(key); got != sha(data) {
		t.Fatal("hash not recorded")
	}
	if ents, _ := os.ReadDir(s.Dir() + "/objects"); len(ents) != 0 {
		t.Fatalf("objects written: %v", ents)
	}
	if r := c.publish(key, nil); r.code != 201 {
		t.Fatalf("publish: %d %s", r.code, r.body)
	}
	// Sign skips the API: no request counted, no rate limit charged.
	su, skey := s.Sign("bench.ply")
	if r, err := c.put(su, data); err != nil || r.code != 200 {
		t.Fatalf("PUT to Sign URL: %v %d", err, r.code)
	}
	if _, _, ok := s.Object(skey); !ok || s.Stats().Total(RouteSignedURL) != 1 {
		t.Fatal("Sign")
	}
}

func TestPublishLifecycle(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{Now: clk.Now, ProcessingDelay: 2 * time.Second})
	c := newClient(t, s)
	data := plyBytes(5000)
	key := c.upload("a.ply", data)
	r := c.publish(key, map[string]any{"format": "compressed.ply", "listed": true})
	if r.code != 201 {
		t.Fatalf("publish: %d %s", r.code, r.body)
	}
	m := r.json(t)
	want := map[string]any{
		"id": "1", "title": "T", "description": "D", "format": "", "version": 0.0, "currentVersion": 1.0,
		"releaseNotes": nil, "hasThumbnails": false, "size": 0.0, "views": 0.0, "comments": 0.0,
		"starred": 0.0, "featuredWeight": 0.0, "listed": true, "userId": 1001.0, "completedAt": nil,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %#v (present %v), want %#v", k, got, ok, v)
		}
	}
	task, _ := m["task"].(map[string]any)
	if task["status"] != "running" || task["message"] != "" {
		t.Errorf("task %v", task)
	}
	hash, _ := m["hash"].(string)
	if hash == "" || m["url"] != s.URL()+"/view?id="+hash {
		t.Errorf("hash %q url %v", hash, m["url"])
	}
	if tags, ok := m["tags"].([]any); !ok || len(tags) != 0 {
		t.Errorf("tags %#v", m["tags"])
	}
	for _, f := range []string{"createdAt", "modifiedAt"} {
		if _, err := time.Parse(time.RFC3339, m[f].(string)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}

	get := func() map[string]any {
		r := c.do("GET", "/api/splats/1", nil)
		if r.code != 200 {
			t.Fatalf("get: %d %s", r.code, r.body)
		}
		return r.json(t)
	}
	clk.Add(time.Second)
	if g := get(); g["task"].(map[string]any)["status"] != "running" || g["completedAt"] != nil {
		t.Errorf("before delay: %v", g)
	}
	clk.Add(time.Second)
	g := get()
	if g["task"].(map[string]any)["status"] != "completed" || g["completedAt"] == nil || g["format"] != "compressed.ply" || g["size"] != float64(len(data)) {
		t.Errorf("after delay: %v", g)
	}
	rec, ok := s.Splat("1")
	if !ok || rec.ObjectSHA256 != sha(data) || rec.Status != "completed" || rec.Settings["camera"] == nil || !rec.Listed {
		t.Errorf("record %+v", rec)
	}

	// Content that is neither PLY nor SOG fails processing with a message.
	bad := c.upload("junk.ply", []byte("this is not a splat"))
	if r := c.publish(bad, nil); r.code != 201 {
		t.Fatalf("publish junk: %d", r.code)
	}
	clk.Add(2 * time.Second)
	g2 := c.do("GET", "/api/splats/2", nil).json(t)
	task2 := g2["task"].(map[string]any)
	if task2["status"] != "failed" || task2["message"] == "" {
		t.Errorf("junk: %v", g2)
	}
	// A SOG (ZIP) passes.
	sog := c.upload("a.sog", []byte("PK\x03\x04rest-of-zip"))
	c.publish(sog, nil)
	clk.Add(2 * time.Second)
	if st := c.do("GET", "/api/splats/3", nil).json(t)["task"].(map[string]any)["status"]; st != "completed" {
		t.Errorf("sog: %v", st)
	}

	for _, id := range []string{"4", "0", "01", "abc"} {
		r := c.do("GET", "/api/splats/"+id, nil)
		if r.code != 404 || r.errorText(t) != "splat not found" {
			t.Errorf("get %s: %d %s", id, r.code, r.body)
		}
	}
	if n := len(s.Splats()); n != 3 {
		t.Errorf("Splats: %d", n)
	}
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{StorageLimit: 150})
	c := newClient(t, s)
	signedOnly := func() string { _, k := c.signedURL("x.ply"); return k }()
	key := c.upload("a.ply", plyBytes(100))
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"no key", map[string]any{"title": "t"}, "storageKey is required"},
		{"unknown key", map[string]any{"storageKey": "uploads/nope/a.ply"}, "invalid storageKey"},
		{"not uploaded", map[string]any{"storageKey": signedOnly}, "not found in storage"},
		{"bad format", map[string]any{"storageKey": key, "format": "ply"}, "invalid format"},
		{"bad settings", map[string]any{"storageKey": key, "settings": []int{1}}, "settings"},
		{"bad title type", map[string]any{"storageKey": key, "title": 5}, "invalid JSON"},
	} {
		r := c.do("POST", "/api/splats/publish", tc.body)
		if r.code != 400 || !strings.Contains(r.errorText(t), tc.want) {
			t.Errorf("%s: %d %s, want 400 %q", tc.name, r.code, r.body, tc.want)
		}
	}
	if r := c.publish(key, nil); r.code != 201 {
		t.Fatalf("publish: %d %s", r.code, r.body)
	}
	if r := c.publish(key, nil); r.code != 400 || r.errorText(t) != "storage limit exceeded" {
		t.Errorf("over storage limit: %d %s", r.code, r.body)
	}
	if st := s.Stats(); st.Publishes != 1 {
		t.Errorf("Publishes %d", st.Publishes)
	}
}

func TestKeyFieldVariantAndNumericIDs(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{KeyField: KeyFieldS3Key, NumericIDs: true, AltFields: true, ProcessingDelay: -1, SuccessStatus: "complete"})
	c := newClient(t, s)
	r := c.do("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"})
	m := r.json(t)
	if _, ok := m["storageKey"]; ok {
		t.Fatalf("storageKey present with KeyField s3Key: %s", r.body)
	}
	key := m["s3Key"].(string)
	if r, err := c.put(m["signedUrl"].(string), plyBytes(64)); err != nil || r.code != 200 {
		t.Fatal("PUT", err)
	}
	// Sent back under the other name: accepted, but counted.
	r = c.do("POST", "/api/splats/publish", map[string]any{"storageKey": key, "format": "sog"})
	if r.code != 201 {
		t.Fatalf("publish: %d %s", r.code, r.body)
	}
	m = r.json(t)
	if m["id"] != 1.0 || m["version"] != "0" || m["thumbnails"] != 0.0 {
		t.Errorf("variant fields: %s", r.body)
	}
	if _, ok := m["release_notes"]; !ok {
		t.Errorf("release_notes missing: %s", r.body)
	}
	if m["task"].(map[string]any)["status"] != "running" {
		t.Errorf("publish answer must say running even without delay")
	}
	if g := c.do("GET", "/api/splats/1", nil).json(t); g["task"].(map[string]any)["status"] != "complete" {
		t.Errorf("get: %v", g)
	}
	if st := s.Stats(); st.KeyFieldMismatches != 1 {
		t.Errorf("KeyFieldMismatches %d", st.KeyFieldMismatches)
	}
}

func TestPublishesByHashAndUncertain(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	a, b := plyBytes(100), plyBytes(200)
	ka := c.upload("a.ply", a)
	ka2 := c.upload("copy-of-a.ply", a)
	kb := c.upload("b.ply", b)

	s.UpdateFaults(func(f *Faults) { f.UncertainPublishes = 1 })
	r := c.publish(ka, nil)
	if r.code != 500 || !strings.Contains(r.errorText(t), "created") {
		t.Fatalf("uncertain publish: %d %s", r.code, r.body)
	}
	if s.Faults().UncertainPublishes != 0 {
		t.Error("UncertainPublishes not decremented")
	}
	for _, k := range []string{ka2, kb} {
		if r := c.publish(k, nil); r.code != 201 {
			t.Fatalf("publish: %d", r.code)
		}
	}
	got := s.PublishesByHash()
	if got[sha(a)] != 2 || got[sha(b)] != 1 || len(got) != 2 {
		t.Errorf("PublishesByHash %v", got)
	}
	st := s.Stats()
	if st.Publishes != 3 || st.Duplicates != 1 || st.Faults != 1 {
		t.Errorf("stats %+v", st)
	}
	if sp := s.Splats(); !sp[0].Uncertain || sp[1].Uncertain {
		t.Errorf("Uncertain flags %+v", sp)
	}
}

func TestRouteErrorRate(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{Faults: Faults{ErrorRate: map[string]float64{RoutePublish: 1}, ErrorStatus: 503}})
	c := newClient(t, s)
	key := c.upload("a.ply", plyBytes(100))
	for range 3 {
		r := c.publish(key, nil)
		if r.code != 503 || r.errorText(t) == "" {
			t.Fatalf("faulty publish: %d %s", r.code, r.body)
		}
	}
	if len(s.Splats()) != 0 {
		t.Fatal("a plain 5xx fault must have no effect")
	}
	// A rate in between fails some and not all, repeatably for a seed.
	s.SetFaults(Faults{ErrorRate: map[string]float64{RouteGetSplat: 0.5}})
	fails := 0
	for range 100 {
		if r := c.do("GET", "/api/splats/9", nil); r.code == 500 {
			fails++
		} else if r.code != 404 {
			t.Fatalf("get: %d", r.code)
		}
	}
	if fails < 20 || fails > 80 {
		t.Errorf("%d of 100 failed at rate 0.5", fails)
	}
	s.SetFaults(Faults{})
	if r := c.publish(key, nil); r.code != 201 {
		t.Fatalf("publish after clearing faults: %d", r.code)
	}
	if st := s.Stats(); st.Faults != 3+fails || st.Count(RoutePublish, 503) != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestStorageFaults(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	c := newClient(t, s)
	data := plyBytes(4 << 20)

	s.SetFaults(Faults{StorageResetRate: 1})
	u, key := c.signedURL("a.ply")
	if r, err := c.put(u, data); err == nil {
		t.Fatalf("PUT through a reset succeeded: %d", r.code)
	}
	if _, _, ok := s.Object(key); ok {
		t.Fatal("a cut upload became an object")
	}
	if ents, _ := os.ReadDir(s.Dir() + "/objects"); len(ents) != 0 {
		t.Fatalf("temp file left behind: %v", ents)
	}

	s.SetFaults(Faults{StorageErrorRate: 1})
	if r, err := c.put(u, data); err != nil || r.code != 503 || !strings.Contains(string(r.body), "SlowDown") {
		t.Fatalf("503 fault: %v %d %s", err, r.code, r.body)
	}
	s.SetFaults(Faults{StorageForbiddenRate: 1})
	if r, err := c.put(u, data); err != nil || r.code != 403 {
		t.Fatalf("403 fault: %v %d", err, r.code)
	}
	s.SetFaults(Faults{Latency: 20 * time.Millisecond})
	if r, err := c.put(u, data); err != nil || r.code != 200 {
		t.Fatalf("PUT after faults: %v %d", err, r.code)
	}
	if got, _, _ := s.Object(key); got != sha(data) {
		t.Fatal("sha mismatch")
	}
	st := s.Stats()
	if st.UploadResets != 1 || st.Faults != 3 || st.Uploads != 1 || st.Count(RouteStoragePut, 0) != 1 {
		t.Errorf("stats %+v", st)
	}
}

// rl reads the three rate-limit headers.
func rl(t *testing.T, r reply) (limit, remaining int, reset int64) {
	t.Helper()
	var err1, err2, err3 error
	limit, err1 = strconv.Atoi(r.header.Get("X-RateLimit-Limit"))
	remaining, err2 = strconv.Atoi(r.header.Get("X-RateLimit-Remaining"))
	reset, err3 = strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("rate-limit headers %v: %v", r.header, err)
	}
	return
}

func TestRateLimitFakeClock(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{
		Now: clk.Now, Window: 10 * time.Second,
		Limits:  map[Class]int{ClassNormal: 3, ClassStrict: 2},
		Classes: map[string]Class{RoutePublish: ClassStrict, RouteSignedURL: ClassStrict},
	})
	c := newClient(t, s)
	start := clk.Now()
	wantReset := start.Truncate(time.Second).Add(10 * time.Second).Unix()
	for i := range 3 {
		r := c.do("GET", "/api/splats/1", nil)
		limit, rem, reset := rl(t, r)
		if r.code != 404 || limit != 3 || rem != 2-i || reset != wantReset {
			t.Fatalf("request %d: %d limit=%d remaining=%d reset=%d want reset %d", i, r.code, limit, rem, reset, wantReset)
		}
	}
	clk.Add(3 * time.Second)
	r := c.do("GET", "/api/splats/1", nil)
	if r.code != 429 || r.errorText(t) != "Too many requests" {
		t.Fatalf("over limit: %d %s", r.code, r.body)
	}
	if _, rem, reset := rl(t, r); rem != 0 || reset != wantReset {
		t.Errorf("429 headers remaining=%d reset=%d", rem, reset)
	}
	// 6.5 s are left in the window: Retry-After rounds up.
	if ra := r.header.Get("Retry-After"); ra != "7" {
		t.Errorf("Retry-After %q, want 7", ra)
	}
	// The strict class has its own budget.
	r = c.do("POST", "/api/upload/signed-url", map[string]string{"fileName": "a"})
	if limit, rem, _ := rl(t, r); r.code != 200 || limit != 2 || rem != 1 {
		t.Errorf("strict: %d limit=%d remaining=%d", r.code, limit, rem)
	}
	// One nanosecond before Reset it is still refused; at Reset a new window opens.
	clk.Set(time.Unix(wantReset, 0).Add(-time.Nanosecond))
	if r := c.do("GET", "/api/splats/1", nil); r.code != 429 {
		t.Errorf("just before reset: %d", r.code)
	}
	clk.Set(time.Unix(wantReset, 0))
	r = c.do("GET", "/api/splats/1", nil)
	if _, rem, reset := rl(t, r); r.code != 404 || rem != 2 || reset != wantReset+10 {
		t.Errorf("after reset: %d remaining=%d reset=%d", r.code, rem, reset)
	}
	st := s.Stats()
	if st.RateLimited != 2 || st.Count(RouteGetSplat, 429) != 2 {
		t.Errorf("stats %+v", st)
	}
	// Another token has its own windows.
	s.SetTokens(s.Token(), "other")
	c.token = "other"
	if _, rem, _ := rl(t, c.do("GET", "/api/splats/1", nil)); rem != 2 {
		t.Errorf("other token remaining %d", rem)
	}
}

func TestRateLimitSubSecondWindowRealClock(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{Window: 200 * time.Millisecond, Limits: map[Class]int{ClassNormal: 2}})
	c := newClient(t, s)
	// Spend the window, then wait until the advertised Reset: the first
	// request after it must pass, whatever the window's true length.
	for round := range 2 {
		var reset int64
		for {
			r := c.do("GET", "/api/splats/1", nil)
			_, _, reset = rl(t, r)
			if r.code == 429 {
				break
			}
		}
		time.Sleep(time.Until(time.Unix(reset, 0)))
		if r := c.do("GET", "/api/splats/1", nil); r.code != 404 {
			t.Fatalf("round %d: request at Reset got %d", round, r.code)
		}
	}
}

func TestNeighbourAndForce429(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{Now: clk.Now, Window: time.Minute, Limits: map[Class]int{ClassNormal: 10}})
	c := newClient(t, s)
	s.SetFaults(Faults{Neighbour: map[Class]int{ClassNormal: 7}})
	if _, rem, _ := rl(t, c.do("GET", "/api/splats/1", nil)); rem != 2 {
		t.Errorf("with a neighbour spending 7: remaining %d, want 2", rem)
	}
	s.Consume(s.Token(), ClassNormal, 5)
	if r := c.do("GET", "/api/splats/1", nil); r.code != 429 {
		t.Errorf("after Consume: %d", r.code)
	}
	clk.Add(time.Minute)
	s.SetFaults(Faults{Force429: true})
	r := c.do("GET", "/api/splats/1", nil)
	if _, rem, _ := rl(t, r); r.code != 429 || rem != 0 || r.header.Get("Retry-After") == "" {
		t.Errorf("Force429: %d remaining=%d", r.code, rem)
	}
	s.SetFaults(Faults{})
	if _, rem, _ := rl(t, c.do("GET", "/api/splats/1", nil)); rem != 9 {
		t.Errorf("Force429 must not charge the window: remaining %d", rem)
	}
}

func TestCheckpointsPagination(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{Branches: map[string]int{"main": 123, "empty": 0}})
	c := newClient(t, s)
	want, _ := s.Checkpoints("main")
	if len(want) != 123 {
		t.Fatalf("seeded %d", len(want))
	}
	for _, limit := range []int{50, 7, 1} {
		var got []map[string]any
		skip, pages := "", 0
		for {
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if skip != "" {
				q.Set("skip", skip)
			}
			r := c.do("GET", "/api/branches/main/checkpoints?"+q.Encode(), nil)
			if r.code != 200 {
				t.Fatalf("page: %d %s", r.code, r.body)
			}
			m := r.json(t)
			pag := m["pagination"].(map[string]any)
			if len(pag) != 1 {
				t.Errorf("pagination %v: only hasMore expected", pag)
			}
			res := m["result"].([]any)
			if len(res) > limit {
				t.Fatalf("page of %d > limit %d", len(res), limit)
			}
			for _, e := range res {
				got = append(got, e.(map[string]any))
			}
			pages++
			if pag["hasMore"] != true {
				break
			}
			skip = got[len(got)-1]["id"].(string)
		}
		if len(got) != 123 || pages != (123+limit-1)/limit {
			t.Fatalf("limit %d: %d checkpoints in %d pages", limit, len(got), pages)
		}
		var prev time.Time
		for i, cp := range got {
			if cp["id"] != want[i].ID {
				t.Fatalf("limit %d: #%d is %v, want %s", limit, i, cp["id"], want[i].ID)
			}
			at, err := time.Parse(time.RFC3339, cp["createdAt"].(string))
			if err != nil || (i > 0 && !at.Before(prev)) {
				t.Fatalf("#%d createdAt %v not older than %v (%v)", i, at, prev, err)
			}
			prev = at
			u := cp["user"].(map[string]any)
			if _, ok := u["id"].(float64); !ok || u["fullName"] == "" || u["username"] == "" || cp["description"] == "" {
				t.Fatalf("checkpoint shape %v", cp)
			}
		}
	}

	r := c.do("GET", "/api/branches/empty/checkpoints", nil)
	if r.code != 200 || string(r.body) != `{"pagination":{"hasMore":false},"result":[]}`+"\n" {
		t.Errorf("empty branch: %d %s", r.code, r.body)
	}
	r = c.do("GET", "/api/branches/main/checkpoints", nil)
	if res := r.json(t)["result"].([]any); len(res) != DefaultCheckpointLimit {
		t.Errorf("default limit: %d", len(res))
	}
	for _, q := range []string{"limit=51", "limit=0", "limit=-1", "limit=abc", "limit=", "limit=5&skip=nope"} {
		r := c.do("GET", "/api/branches/main/checkpoints?"+q, nil)
		if r.code != 400 || r.errorText(t) == "" {
			t.Errorf("%s: %d %s", q, r.code, r.body)
		}
	}
	r = c.do("GET", "/api/branches/nope/checkpoints?limit=5", nil)
	if r.code != 404 || r.errorText(t) != "branch not found" {
		t.Errorf("unknown branch: %d %s", r.code, r.body)
	}
	if r := c.do("POST", "/api/branches/main/checkpoints", "{}"); r.code != 405 {
		t.Errorf("POST: %d", r.code)
	}

	// New checkpoints appear on the first page; a cursor keeps its place.
	added := s.AddCheckpoints("main", 2)
	m := c.do("GET", "/api/branches/main/checkpoints?limit=3", nil).json(t)
	res := m["result"].([]any)
	if res[0].(map[string]any)["id"] != added[0].ID || res[2].(map[string]any)["id"] != want[0].ID {
		t.Errorf("after AddCheckpoints: %v", res)
	}
	m = c.do("GET", "/api/branches/main/checkpoints?limit=50&skip="+want[121].ID, nil).json(t)
	if res := m["result"].([]any); len(res) != 1 || res[0].(map[string]any)["id"] != want[122].ID || m["pagination"].(map[string]any)["hasMore"] != false {
		t.Errorf("last page: %v", m)
	}
}

func TestViewPage(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	key := c.upload("a.ply", plyBytes(100))
	m := c.publish(key, map[string]any{"title": "<Scan>"}).json(t)
	c.token = ""
	req, _ := http.NewRequest("GET", m["url"].(string), nil)
	r := c.send(req)
	if r.code != 200 || !strings.Contains(string(r.body), "&lt;Scan&gt;") {
		t.Errorf("view: %d %s", r.code, r.body)
	}
	req, _ = http.NewRequest("GET", s.URL()+"/view?id=nope", nil)
	if r := c.send(req); r.code != 404 {
		t.Errorf("unknown view: %d", r.code)
	}
}

func TestSeedIsDeterministic(t *testing.T) {
	t.Parallel()
	ids := func() string {
		s := newSim(t, Options{Seed: 7, Branches: map[string]int{"main": 3}})
		cps, _ := s.Checkpoints("main")
		_, key := s.Sign("a.ply")
		return fmt.Sprint(cps[0].ID, cps[2].ID, key)
	}
	if a, b := ids(), ids(); a != b {
		t.Errorf("seed 7 gave %s then %s", a, b)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1, Faults: Faults{StorageErrorRate: 0.3, ErrorRate: map[string]float64{RoutePublish: 0.3}}})
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			c := newClient(t, s)
			data := plyBytes(1000 + w)
			u, key := c.signedURL("f.ply")
			for {
				if r, err := c.put(u, data); err == nil && r.code == 200 {
					break
				}
			}
			for {
				if r := c.publish(key, nil); r.code == 201 {
					break
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if got := s.PublishesByHash(); len(got) != 4 {
		t.Errorf("PublishesByHash %v", got)
	}
	for _, sp := range s.Splats() {
		if sp.Status != "completed" {
			t.Errorf("splat %s status %s", sp.ID, sp.Status)
		}
	}
}

// TestCountedErrorsWithRetryAfter: Faults.Errors fails exactly the next N
// requests of a route, with ErrorStatus and the ErrorRetryAfter header.
func TestCountedErrorsWithRetryAfter(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	c := newClient(t, s)
	s.SetFaults(Faults{Errors: map[string]int{RouteSignedURL: 2}, ErrorStatus: 503, ErrorRetryAfter: "315360000"})
	for i := range 2 {
		r := c.do("POST", "/api/upload/signed-url", map[string]string{"fileName": "a.ply"})
		if r.code != 503 || r.header.Get("Retry-After") != "315360000" {
			t.Fatalf("request %d: %d, Retry-After %q", i, r.code, r.header.Get("Retry-After"))
		}
	}
	if u, _ := c.signedURL("a.ply"); u == "" {
		t.Fatal("no URL after the counted errors")
	}
	if n := s.Faults().Errors[RouteSignedURL]; n != 0 {
		t.Errorf("%d errors left", n)
	}
}

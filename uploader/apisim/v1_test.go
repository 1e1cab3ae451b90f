package apisim

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestV1MeAndErrors(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{Username: "ada"})
	c := newClient(t, s)
	r := c.doV1("GET", "/v1/me", nil, nil)
	if r.code != 200 || !reflect.DeepEqual(r.json(t), map[string]any{"id": "1001", "username": "ada"}) {
		t.Fatalf("me: %d %s", r.code, r.body)
	}
	if limit, _, _ := rl(t, r); limit != DefaultNormalLimit {
		t.Errorf("v1 route limit %d", limit)
	}
	for _, tc := range []struct {
		method, path string
		want         int
		msg          string
	}{
		{"GET", "/v1/nope", 404, "Resource not found"},
		{"GET", "/v2/me", 404, "Resource not found"},
		{"GET", "/v1/splats/nosuchid", 404, "Resource not found"},
		{"GET", "/v1/splats/uploads/nosuchid", 404, "Resource not found"},
		{"GET", "/v1/splats/" + strings.Repeat("x", 101), 400, "Invalid request"},
		{"GET", "/v1/splats/uploads/" + strings.Repeat("x", 201), 400, "Invalid request"},
		{"POST", "/v1/me", 405, "Method not allowed"},
	} {
		r := c.doV1(tc.method, tc.path, nil, nil)
		if r.code != tc.want || r.errorText(t) != tc.msg {
			t.Errorf("%s %s: %d %s, want %d %q", tc.method, tc.path, r.code, r.body, tc.want, tc.msg)
		}
	}
	c.token = "wrong"
	if r := c.doV1("GET", "/v1/me", nil, nil); r.code != 401 || r.errorText(t) != "Unauthorized" {
		t.Errorf("bad token: %d %s", r.code, r.body)
	}

	s2 := newSim(t, Options{NullUsername: true, UserID: 7})
	c2 := newClient(t, s2)
	if m := c2.doV1("GET", "/v1/me", nil, nil).json(t); m["id"] != "7" || m["username"] != nil {
		t.Errorf("null username: %v", m)
	}
}

func TestV1Journey(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{Now: clk.Now, ProcessingDelay: 2 * time.Second})
	c := newClient(t, s)
	data := plyBytes(2<<20 + 12345) // three parts of the default 1 MiB

	sess := c.create("k1", createBody(data), 201)
	if sess.Status != "created" || sess.PartSize != DefaultPartSize || *sess.ContentLength != int64(len(data)) || len(sess.UploadedParts) != 0 || sess.SplatID != "" {
		t.Fatalf("new session %+v", sess)
	}
	if exp, err := time.Parse(time.RFC3339, sess.ExpiresAt); err != nil || !exp.Equal(clk.Now().Add(DefaultSessionExpiry).Truncate(time.Millisecond)) {
		t.Errorf("expiresAt %q: %v", sess.ExpiresAt, err)
	}
	if got := c.getSession(sess.ID); got.Status != "created" {
		t.Errorf("GET new session: %+v", got)
	}

	urls := c.signParts(sess.ID, 1, 2, 3)
	for n, u := range urls {
		if !strings.HasPrefix(u, s.StorageURL()+"/parts/"+sess.ID+"/") {
			t.Errorf("part %d URL %q not on storage", n, u)
		}
	}
	etags := map[int]string{}
	for n := 1; n <= 3; n++ {
		p := partOf(data, sess.PartSize, n)
		r, err := c.putRaw(urls[n], p)
		if err != nil || r.code != 200 {
			t.Fatalf("PUT part %d: %v %d %s", n, err, r.code, r.body)
		}
		if e := r.header.Get("ETag"); e != quotedMD5(p) {
			t.Errorf("part %d ETag %s, want quoted md5 %s", n, e, quotedMD5(p))
		}
		etags[n] = r.header.Get("ETag")
	}
	got := c.getSession(sess.ID)
	// Strict by default: the schema makes a part's size optional, so it is
	// left out (TestV1GenerousVariants turns it on).
	want := []sPart{{1, etags[1], 0}, {2, etags[2], 0}, {3, etags[3], 0}}
	if got.Status != "uploading" || !reflect.DeepEqual(got.UploadedParts, want) {
		t.Fatalf("after parts: %+v", got)
	}

	r := c.complete(sess.ID, completeBody(etags, 3))
	if r.code != 201 {
		t.Fatalf("complete: %d %s", r.code, r.body)
	}
	done := r.json(t)
	id, _ := done["splatId"].(string)
	if len(id) != 8 || done["uploadId"] != sess.ID || done["status"] != "completed" || done["editUrl"] != s.URL()+"/scene/"+id+"/edit" {
		t.Fatalf("complete answer %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/supersplat/v1/splats/"+id {
		t.Errorf("Location %q", loc)
	}
	// The official schema's session has no splatId: strict, none.
	if got := c.getSession(sess.ID); got.Status != "processing" || got.SplatID != "" || len(got.UploadedParts) != 3 {
		t.Errorf("session after complete: %+v", got)
	}
	raw := c.doV1("GET", "/v1/splats/uploads/"+sess.ID, nil, nil).json(t)
	for _, f := range []string{"splatId", "sourceFormat", "createdAt"} {
		if _, ok := raw[f]; ok {
			t.Errorf("session has %s, which the schema's UploadSession does not: %v", f, raw)
		}
	}
	sp := c.doV1("GET", "/v1/splats/"+id, nil, nil).json(t)
	wantSplat := map[string]any{
		"id": id, "title": "Scan", "description": "D", "status": "processing", "visibility": "unlisted",
		"format": nil, "size": 0.0, "completedAt": nil, "viewerUrl": s.URL() + "/scene/" + id,
	}
	for k, v := range wantSplat {
		if sp[k] != v {
			t.Errorf("splat %s = %#v, want %#v", k, sp[k], v)
		}
	}
	if _, ok := sp["editUrl"]; ok {
		t.Errorf("splat has editUrl, which the schema's Splat does not: %v", sp)
	}

	clk.Add(2 * time.Second)
	sp = c.doV1("GET", "/v1/splats/"+id, nil, nil).json(t)
	if sp["status"] != "completed" || sp["format"] != "ply" || sp["size"] != float64(len(data)) || sp["completedAt"] == nil || sp["updatedAt"] == sp["createdAt"] {
		t.Errorf("completed splat %v", sp)
	}
	if got := c.getSession(sess.ID); got.Status != "completed" {
		t.Errorf("session status %q", got.Status)
	}

	// A repeat answers 200 with the same body, and creates nothing.
	r2 := c.complete(sess.ID, completeBody(etags, 3))
	if r2.code != 200 || string(r2.body) != string(r.body) || r2.header.Get("Location") != r.header.Get("Location") {
		t.Errorf("repeat complete: %d %s", r2.code, r2.body)
	}
	// Storage takes no more parts, nor signs them.
	if r, err := c.putRaw(urls[1], partOf(data, sess.PartSize, 1)); err != nil || r.code != 404 || !strings.Contains(string(r.body), "NoSuchUpload") {
		t.Errorf("PUT after complete: %v %d %s", err, r.code, r.body)
	}
	if r := c.doV1("POST", "/v1/splats/uploads/"+sess.ID+"/part-upload-urls", map[string]any{"parts": []int{1}}, nil); r.code != 409 || r.errorText(t) != "Invalid upload state" {
		t.Errorf("sign after complete: %d %s", r.code, r.body)
	}

	// The viewer link leads somewhere; the splat is one record of the account.
	c.token = ""
	req, _ := http.NewRequest("GET", s.URL()+"/scene/"+id, nil)
	if r := c.send(req); r.code != 200 || !strings.Contains(string(r.body), "Scan") {
		t.Errorf("viewer page: %d", r.code)
	}
	recs := s.Splats()
	if len(recs) != 1 || recs[0].Protocol != "v1" || recs[0].UploadID != sess.ID || recs[0].ObjectSHA256 != sha(data) || recs[0].Hash != id {
		t.Errorf("Splats %+v", recs)
	}
	if got := s.PublishesByHash(); got[sha(data)] != 1 {
		t.Errorf("PublishesByHash %v", got)
	}
	rec, _ := s.Session(sess.ID)
	if rec.IdempotencyKey != "k1" || rec.ClientID != "splatd" || rec.ClientVersion != "1.2.3" || rec.SplatID != id || rec.Status != "completed" {
		t.Errorf("SessionRecord %+v", rec)
	}
	st := s.Stats()
	ss := st.Sessions[sess.ID]
	if st.Creates != 1 || st.CreateReplays != 0 || st.Completes != 1 || st.CompleteReplays != 1 || st.V1Splats != 1 ||
		st.PartURLs != 3 || st.PartPuts != 3 || st.PartBytes != int64(len(data)) || st.StorageAuthHeaders != 0 ||
		st.UnknownFields != 0 || st.Duplicates != 0 || st.Publishes != 0 || st.Uploads != 0 {
		t.Errorf("stats %+v", st)
	}
	// The refused PUT after complete was read too: BytesReceived counts it.
	if ss.PartPuts != 3 || ss.PartBytes != int64(len(data)) || ss.BytesReceived != int64(len(data))+1<<20 || ss.PartsResent != 0 {
		t.Errorf("session stats %+v", ss)
	}
	if st.Count(RouteV1Complete, 201) != 1 || st.Count(RouteV1Complete, 200) != 1 || st.Count(RoutePartPut, 200) != 3 || st.Count(RoutePartPut, 404) != 1 {
		t.Errorf("requests %v", st.Requests)
	}
}

func TestV1IdempotentCreate(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	c := newClient(t, s)
	data := plyBytes(1000)
	a := c.create("key-a", createBody(data), 201)
	again := c.create("key-a", createBody(data), 200)
	if again.ID != a.ID {
		t.Fatalf("same key gave %s then %s", a.ID, again.ID)
	}
	other := createBody(data)
	other["title"] = "Another file"
	if got := c.create("key-a", other, 200); got.ID != a.ID {
		t.Errorf("reused key with another body: new session %s", got.ID)
	}
	if b := c.create("key-b", createBody(data), 201); b.ID == a.ID {
		t.Error("another key gave the same session")
	}
	n1, n2 := c.create("", createBody(data), 201), c.create("", createBody(data), 201)
	if n1.ID == n2.ID {
		t.Error("creates without a key share a session")
	}
	for name, key := range map[string]string{"too long": strings.Repeat("k", 201)} {
		r := c.doV1("POST", "/v1/splats/uploads", createBody(data), map[string]string{"Idempotency-Key": key})
		if r.code != 400 || r.errorText(t) != "Invalid request" {
			t.Errorf("%s key: %d %s", name, r.code, r.body)
		}
	}
	req, _ := http.NewRequest("POST", s.URL()+"/api/supersplat/v1/splats/uploads", strings.NewReader(`{"sourceFormat":"ply"}`))
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("Content-Type", "application/json")
	req.Header["Idempotency-Key"] = []string{""}
	if r := c.send(req); r.code != 400 {
		t.Errorf("empty key: %d %s", r.code, r.body)
	}
	c.create(strings.Repeat("k", 200), map[string]any{"sourceFormat": "sog"}, 201)

	// A create that commits and then answers 502: the same key finds it.
	s.UpdateFaults(func(f *Faults) { f.UncertainCreates = 1 })
	r := c.doV1("POST", "/v1/splats/uploads", createBody(data), map[string]string{"Idempotency-Key": "key-c"})
	if r.code != 502 || r.errorText(t) == "" {
		t.Fatalf("uncertain create: %d %s", r.code, r.body)
	}
	c1 := c.create("key-c", createBody(data), 200)
	if rec, ok := s.Session(c1.ID); !ok || rec.IdempotencyKey != "key-c" || rec.Replays != 1 {
		t.Errorf("session behind the 502: %+v", rec)
	}
	st := s.Stats()
	if st.Creates != 6 || st.CreateReplays != 3 || st.KeyMismatches != 1 || st.Faults != 1 || s.Faults().UncertainCreates != 0 {
		t.Errorf("stats %+v", st)
	}
	if n := len(s.Sessions()); n != 6 {
		t.Errorf("%d sessions", n)
	}
}

func TestV1ResumeFromUploadedParts(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	data := plyBytes(3<<20 - 7)
	sess := c.create("resume", createBody(data), 201)
	c.putParts(sess.ID, data, sess.PartSize, 1, 3)

	// The client lost everything but the key: the same key and the
	// session's uploadedParts tell it what is left.
	again := c.create("resume", createBody(data), 200)
	etags := map[int]string{}
	var have []int
	for _, p := range again.UploadedParts {
		etags[p.PartNumber] = p.ETag
		have = append(have, p.PartNumber)
	}
	if !slices.Equal(have, []int{1, 3}) || again.Status != "uploading" {
		t.Fatalf("resumed session %+v", again)
	}
	for n, e := range c.putParts(sess.ID, data, sess.PartSize, 2) {
		etags[n] = e
	}
	if r := c.complete(sess.ID, completeBody(etags, 3)); r.code != 201 {
		t.Fatalf("complete: %d %s", r.code, r.body)
	}
	ss := s.Stats().Sessions[sess.ID]
	if ss.BytesReceived != int64(len(data)) || ss.PartsResent != 0 || ss.PartPuts != 3 {
		t.Errorf("resume sent bytes again: %+v", ss)
	}
	if got := s.PublishesByHash()[sha(data)]; got != 1 {
		t.Errorf("published %d times", got)
	}

	// A part sent twice is counted as re-sent, and the later one counts.
	s2 := c.create("twice", createBody(data), 201)
	c.putParts(s2.ID, data, s2.PartSize, 1)
	c.putParts(s2.ID, data, s2.PartSize, 1)
	if ss := s.Stats().Sessions[s2.ID]; ss.PartsResent != 1 || ss.BytesReceived != 2<<20 {
		t.Errorf("re-sent part: %+v", ss)
	}
}

func TestV1ClosedSchemas(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{})
	c := newClient(t, s)
	ok := func(extra map[string]any) map[string]any {
		b := map[string]any{"sourceFormat": "ply", "contentLength": 10}
		for k, v := range extra {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		body    any
		unknown []string
	}{
		{"unknown top field", ok(map[string]any{"visibility": "listed"}), []string{"visibility"}},
		{"two unknown fields", ok(map[string]any{"listed": true, "settings": map[string]any{}}), []string{"listed", "settings"}},
		{"unknown in uploadClient", ok(map[string]any{"uploadClient": map[string]any{"id": "splatd", "name": "x"}}), []string{"uploadClient.name"}},
		{"sourceFormat missing", ok(map[string]any{"sourceFormat": nil}), nil},
		{"sourceFormat not in enum", ok(map[string]any{"sourceFormat": "obj"}), nil},
		{"sourceFormat case", ok(map[string]any{"sourceFormat": "PLY"}), nil},
		{"sourceFormat null", `{"sourceFormat":null}`, nil},
		{"contentLength string", ok(map[string]any{"contentLength": "10"}), nil},
		{"contentLength fraction", `{"sourceFormat":"ply","contentLength":1.5}`, nil},
		{"contentLength negative", ok(map[string]any{"contentLength": -1}), nil},
		{"contentLength too big", ok(map[string]any{"contentLength": int64(25000000001)}), nil},
		{"contentLength null", `{"sourceFormat":"ply","contentLength":null}`, nil},
		{"title empty", ok(map[string]any{"title": ""}), nil},
		{"title 101 characters", ok(map[string]any{"title": strings.Repeat("é", 101)}), nil},
		{"description 5001", ok(map[string]any{"description": strings.Repeat("d", 5001)}), nil},
		{"uploadClient not object", ok(map[string]any{"uploadClient": "splatd"}), nil},
		{"uploadClient.id missing", ok(map[string]any{"uploadClient": map[string]any{"version": "1"}}), nil},
		{"uploadClient.id upper", ok(map[string]any{"uploadClient": map[string]any{"id": "Splatd"}}), nil},
		{"uploadClient.id dash first", ok(map[string]any{"uploadClient": map[string]any{"id": "-splatd"}}), nil},
		{"uploadClient.id 65", ok(map[string]any{"uploadClient": map[string]any{"id": strings.Repeat("a", 65)}}), nil},
		{"uploadClient.version empty", ok(map[string]any{"uploadClient": map[string]any{"id": "a", "version": ""}}), nil},
		{"uploadClient.version 65", ok(map[string]any{"uploadClient": map[string]any{"id": "a", "version": strings.Repeat("1", 65)}}), nil},
		{"softwareTools 7", ok(map[string]any{"softwareTools": []string{"a", "b", "c", "d", "e", "f", "g"}}), nil},
		{"softwareTools twice", ok(map[string]any{"softwareTools": []string{"a", "a"}}), nil},
		{"softwareTools pattern", ok(map[string]any{"softwareTools": []string{"Post Shot"}}), nil},
		{"array body", `[]`, nil},
		{"not JSON", `{`, nil},
		{"trailing data", `{"sourceFormat":"ply"} {}`, nil},
		{"empty body", ``, nil},
	} {
		r := c.doV1("POST", "/v1/splats/uploads", tc.body, nil)
		if tc.name == "empty body" {
			req, _ := http.NewRequest("POST", s.URL()+"/api/supersplat/v1/splats/uploads", nil)
			req.Header.Set("Authorization", "Bearer "+s.Token())
			req.Header.Set("Content-Type", "application/json")
			r = c.send(req)
		}
		if r.code != 400 || r.errorText(t) != "Invalid request" {
			t.Errorf("%s: %d %s", tc.name, r.code, r.body)
		}
	}
	// Not JSON at all: the schema needs application/json.
	req, _ := http.NewRequest("POST", s.URL()+"/api/supersplat/v1/splats/uploads", strings.NewReader(`{"sourceFormat":"ply"}`))
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("Content-Type", "text/plain")
	if r := c.send(req); r.code != 400 {
		t.Errorf("text/plain: %d", r.code)
	}

	// The edges of every limit pass.
	for _, body := range []any{
		map[string]any{"sourceFormat": "spz"},
		map[string]any{"sourceFormat": "lcc", "contentLength": 0},
		map[string]any{"sourceFormat": "ssog", "contentLength": int64(25000000000)},
		`{"sourceFormat":"sog","contentLength":1e3}`,
		map[string]any{
			"sourceFormat": "ply", "contentLength": 5, "title": strings.Repeat("é", 100), "description": strings.Repeat("d", 5000),
			"uploadClient":  map[string]any{"id": "a" + strings.Repeat("-", 63), "version": strings.Repeat("v", 64)},
			"softwareTools": []string{"a", "b", "c", "d", "e", "postshot-2"},
		},
	} {
		c.create("", body, 201)
	}

	sess := c.create("", map[string]any{"sourceFormat": "ply", "contentLength": 3 << 20}, 201)
	path := "/v1/splats/uploads/" + sess.ID
	for _, tc := range []struct {
		name, route string
		body        any
		unknown     []string
	}{
		{"urls unknown field", "/part-upload-urls", map[string]any{"parts": []int{1}, "expires": 60}, []string{"expires"}},
		{"urls empty", "/part-upload-urls", map[string]any{"parts": []int{}}, nil},
		{"urls 101", "/part-upload-urls", map[string]any{"parts": make([]int, 101)}, nil},
		{"urls zero", "/part-upload-urls", map[string]any{"parts": []int{0}}, nil},
		{"urls 10001", "/part-upload-urls", map[string]any{"parts": []int{10001}}, nil},
		{"urls string", "/part-upload-urls", map[string]any{"parts": []string{"1"}}, nil},
		{"urls beyond N", "/part-upload-urls", map[string]any{"parts": []int{1, 4}}, nil},
		{"urls objects", "/part-upload-urls", map[string]any{"parts": []map[string]int{{"partNumber": 1}}}, nil},
		{"complete unknown in item", "/complete", map[string]any{"parts": []map[string]any{{"partNumber": 1, "etag": `"x"`, "size": 5}}}, []string{"parts[].size"}},
		{"complete unknown top", "/complete", map[string]any{"parts": []map[string]any{{"partNumber": 1, "etag": `"x"`}}, "uploadId": sess.ID}, []string{"uploadId"}},
		{"complete no parts", "/complete", map[string]any{"parts": []int{}}, nil},
		{"complete etag missing", "/complete", map[string]any{"parts": []map[string]any{{"partNumber": 1}}}, nil},
		{"complete partNumber 0", "/complete", map[string]any{"parts": []map[string]any{{"partNumber": 0, "etag": "x"}}}, nil},
		{"complete not numbers", "/complete", map[string]any{"parts": []int{1, 2, 3}}, nil},
	} {
		r := c.doV1("POST", path+tc.route, tc.body, nil)
		if r.code != 400 || r.errorText(t) != "Invalid request" {
			t.Errorf("%s: %d %s", tc.name, r.code, r.body)
		}
	}
	for _, q := range []string{"limit=0", "limit=129", "limit=x", "limit=", "skip=-1", "skip=100001", "skip=1.5"} {
		if r := c.doV1("GET", "/v1/splats?"+q, nil, nil); r.code != 400 || r.errorText(t) != "Invalid request" {
			t.Errorf("list %s: %d %s", q, r.code, r.body)
		}
	}

	st := s.Stats()
	wantNames := map[string]int{"visibility": 1, "listed": 1, "settings": 1, "uploadClient.name": 1, "expires": 1, "parts[].size": 1, "uploadId": 1}
	if st.UnknownFields != 6 || !reflect.DeepEqual(st.UnknownFieldNames, wantNames) {
		t.Errorf("UnknownFields %d %v", st.UnknownFields, st.UnknownFieldNames)
	}
	if st.InvalidRequests["unknown field listed, settings"] != 1 || len(st.InvalidRequests) < 40 {
		t.Errorf("InvalidRequests %v", st.InvalidRequests)
	}
}

func TestV1CompleteChecks(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	data := plyBytes(3<<20 - 100)
	sess := c.create("", createBody(data), 201)
	etags := c.putParts(sess.ID, data, sess.PartSize, 1, 2, 3)
	unquoted := map[int]string{1: strings.Trim(etags[1], `"`), 2: etags[2], 3: etags[3]}
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"missing last part", completeBody(etags, 2)},
		{"missing middle part", map[string]any{"parts": []map[string]any{{"partNumber": 1, "etag": etags[1]}, {"partNumber": 3, "etag": etags[3]}}}},
		{"descending", map[string]any{"parts": []map[string]any{{"partNumber": 2, "etag": etags[2]}, {"partNumber": 1, "etag": etags[1]}, {"partNumber": 3, "etag": etags[3]}}}},
		{"repeated", map[string]any{"parts": []map[string]any{{"partNumber": 1, "etag": etags[1]}, {"partNumber": 1, "etag": etags[1]}}}},
		{"unquoted etag", completeBody(unquoted, 3)},
		{"swapped etags", completeBody(map[int]string{1: etags[2], 2: etags[1], 3: etags[3]}, 3)},
		{"one part too many", completeBody(etags, 4)},
	} {
		r := c.complete(sess.ID, tc.body)
		if r.code != 400 || r.errorText(t) != "Invalid request" {
			t.Errorf("%s: %d %s", tc.name, r.code, r.body)
		}
	}
	// A part of the wrong size (the client split the file its own way).
	short := c.putParts(sess.ID, data[:1000], sess.PartSize, 1)
	etags2 := map[int]string{1: short[1], 2: etags[2], 3: etags[3]}
	if r := c.complete(sess.ID, completeBody(etags2, 3)); r.code != 400 {
		t.Errorf("short part: %d %s", r.code, r.body)
	}
	if st := s.Stats(); st.InvalidRequests["parts: EntityTooSmall: part 1 has 1000 bytes, partSize is 1048576"] != 1 || st.Completes != 0 {
		t.Errorf("stats %v", st.InvalidRequests)
	}
	etags = c.putParts(sess.ID, data, sess.PartSize, 1)
	etags[2], etags[3] = etags2[2], etags2[3]
	if r := c.complete(sess.ID, completeBody(etags, 3)); r.code != 201 {
		t.Fatalf("complete after the fixes: %d %s", r.code, r.body)
	}

	// Without contentLength, the client's last part is N and sizes still
	// must follow partSize.
	free := c.create("", map[string]any{"sourceFormat": "ply"}, 201)
	if free.ContentLength != nil {
		t.Errorf("contentLength %v, want null", *free.ContentLength)
	}
	e := c.putParts(free.ID, data, free.PartSize, 1, 2)
	if r := c.complete(free.ID, completeBody(e, 2)); r.code != 201 {
		t.Errorf("complete without contentLength: %d %s", r.code, r.body)
	}
	if rec := s.Splats()[1]; rec.Size != 2<<20 {
		t.Errorf("size %d", rec.Size)
	}

	// An empty file is one empty part.
	empty := c.create("", map[string]any{"sourceFormat": "lcc", "contentLength": 0}, 201)
	e = c.putParts(empty.ID, nil, empty.PartSize, 1)
	if r := c.complete(empty.ID, completeBody(e, 1)); r.code != 201 {
		t.Errorf("empty file: %d %s", r.code, r.body)
	}
	// Content that is not a PLY fails processing, as with the legacy API.
	junk := []byte("not a splat at all")
	id := c.publishV1("", junk)
	if sp := c.doV1("GET", "/v1/splats/"+id, nil, nil).json(t); sp["status"] != "failed" || sp["format"] != nil {
		t.Errorf("junk: %v", sp)
	}
}

func TestV1StateConflictsAndSizeLimit(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{MaxUploadSize: 2 << 20})
	c := newClient(t, s)
	data := plyBytes(1 << 20)
	if r := c.doV1("POST", "/v1/splats/uploads", map[string]any{"sourceFormat": "ply", "contentLength": 2<<20 + 1}, nil); r.code != 413 || r.errorText(t) != "Upload size limit exceeded" {
		t.Errorf("oversize create: %d %s", r.code, r.body)
	}
	c.create("", map[string]any{"sourceFormat": "ply", "contentLength": 2 << 20}, 201)

	// Without contentLength the limit is checked at complete.
	free := c.create("", map[string]any{"sourceFormat": "ply"}, 201)
	big := plyBytes(2<<20 + 1)
	e := c.putParts(free.ID, big, free.PartSize, 1, 2, 3)
	if r := c.complete(free.ID, completeBody(e, 3)); r.code != 413 || r.errorText(t) != "Upload size limit exceeded" {
		t.Errorf("oversize complete: %d %s", r.code, r.body)
	}

	sess := c.create("cancel-me", createBody(data), 201)
	etags := c.putParts(sess.ID, data, sess.PartSize, 1)
	if !s.CancelUpload(sess.ID) || s.CancelUpload(sess.ID) {
		t.Fatal("CancelUpload")
	}
	if got := c.getSession(sess.ID); got.Status != "canceled" {
		t.Errorf("status %q", got.Status)
	}
	for _, r := range []reply{
		c.doV1("POST", "/v1/splats/uploads/"+sess.ID+"/part-upload-urls", map[string]any{"parts": []int{1}}, nil),
		c.complete(sess.ID, completeBody(etags, 1)),
	} {
		if r.code != 409 || r.errorText(t) != "Invalid upload state" {
			t.Errorf("canceled session: %d %s", r.code, r.body)
		}
	}
	// The key still names the canceled session: the client must use a new one.
	if got := c.create("cancel-me", createBody(data), 200); got.ID != sess.ID || got.Status != "canceled" {
		t.Errorf("key of a canceled session: %+v", got)
	}
	if r := c.complete("nosuchupload", completeBody(etags, 1)); r.code != 404 || r.errorText(t) != "Resource not found" {
		t.Errorf("complete unknown: %d %s", r.code, r.body)
	}
	if r := c.doV1("POST", "/v1/splats/uploads/nosuchupload/part-upload-urls", map[string]any{"parts": []int{1}}, nil); r.code != 404 {
		t.Errorf("sign unknown: %d %s", r.code, r.body)
	}
}

func TestV1Expiry(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{Now: clk.Now, URLExpiry: time.Minute, SessionExpiry: time.Hour})
	c := newClient(t, s)
	data := plyBytes(2 << 20)
	sess := c.create("exp", createBody(data), 201)

	// A part URL works until URLExpiry, then storage refuses it; signing
	// again gives a working one.
	urls := c.signParts(sess.ID, 1)
	clk.Add(time.Minute)
	if r, err := c.putRaw(urls[1], partOf(data, sess.PartSize, 1)); err != nil || r.code != 403 || !strings.Contains(string(r.body), "Request has expired") {
		t.Errorf("expired part URL: %v %d %s", err, r.code, r.body)
	}
	// Tampering with the part number breaks the signature.
	fresh := c.signParts(sess.ID, 1)[1]
	tampered := strings.Replace(fresh, "/"+sess.ID+"/1?", "/"+sess.ID+"/2?", 1)
	if r, err := c.putRaw(tampered, partOf(data, sess.PartSize, 2)); err != nil || r.code != 403 || !strings.Contains(string(r.body), "SignatureDoesNotMatch") {
		t.Errorf("tampered part URL: %v %d %s", err, r.code, r.body)
	}
	if r, err := c.putRaw(fresh, partOf(data, sess.PartSize, 1)); err != nil || r.code != 200 {
		t.Fatalf("re-signed part: %v %d", err, r.code)
	}

	// The session itself expires at expiresAt unless completed.
	clk.Add(time.Hour)
	if r := c.doV1("GET", "/v1/splats/uploads/"+sess.ID, nil, nil); r.code != 404 || r.errorText(t) != "Resource not found" {
		t.Errorf("expired session: %d %s", r.code, r.body)
	}
	if rec, _ := s.Session(sess.ID); rec.Status != "expired" {
		t.Errorf("record status %q", rec.Status)
	}
	// Its key is free again.
	next := c.create("exp", createBody(data), 201)
	if next.ID == sess.ID {
		t.Fatal("key of an expired session returned it")
	}

	// ExpireUpload does the same at once.
	if !s.ExpireUpload(next.ID) || s.ExpireUpload(next.ID) {
		t.Fatal("ExpireUpload")
	}
	for _, r := range []reply{
		c.doV1("GET", "/v1/splats/uploads/"+next.ID, nil, nil),
		c.doV1("POST", "/v1/splats/uploads/"+next.ID+"/part-upload-urls", map[string]any{"parts": []int{1}}, nil),
		c.complete(next.ID, completeBody(map[int]string{1: `"x"`, 2: `"y"`}, 2)),
	} {
		if r.code != 404 {
			t.Errorf("after ExpireUpload: %d %s", r.code, r.body)
		}
	}
	// A completed session does not expire.
	id := c.publishV1("done", data)
	done := s.Splats()[0].UploadID
	clk.Add(2 * time.Hour)
	if s.ExpireUpload(done) || c.getSession(done).Status != "completed" || s.Splats()[0].Hash != id {
		t.Error("a completed session expired")
	}
}

func TestV1Faults(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	data := plyBytes(2 << 20)
	sess := c.create("f", createBody(data), 201)
	urls := c.signParts(sess.ID, 1, 2)
	p1 := partOf(data, sess.PartSize, 1)

	s.UpdateFaults(func(f *Faults) { f.PartErrors, f.PartErrorStatus = 2, 500 })
	for range 2 {
		if r, err := c.putRaw(urls[1], p1); err != nil || r.code != 500 || !strings.Contains(string(r.body), "InternalError") {
			t.Fatalf("part error: %v %d %s", err, r.code, r.body)
		}
	}
	s.UpdateFaults(func(f *Faults) { f.PartResets = 1 })
	if r, err := c.putRaw(urls[1], p1); err == nil {
		t.Fatalf("PUT through a reset: %d", r.code)
	}
	s.UpdateFaults(func(f *Faults) { f.ExpiredPartURLs = 1 })
	if r, err := c.putRaw(urls[1], p1); err != nil || r.code != 403 || !strings.Contains(string(r.body), "expired") {
		t.Fatalf("expired fault: %v %d %s", err, r.code, r.body)
	}
	s.UpdateFaults(func(f *Faults) { f.StorageErrorRate = 1 })
	if r, err := c.putRaw(urls[1], p1); err != nil || r.code != 503 {
		t.Fatalf("legacy storage knob on a part: %v %d", err, r.code)
	}
	s.SetFaults(Faults{})
	if got := c.getSession(sess.ID); len(got.UploadedParts) != 0 || got.Status != "created" {
		t.Fatalf("a failed PUT stored a part: %+v", got)
	}
	etags := map[int]string{}
	for n := 1; n <= 2; n++ {
		r, err := c.putRaw(urls[n], partOf(data, sess.PartSize, n))
		if err != nil || r.code != 200 {
			t.Fatalf("PUT %d: %v %d", n, err, r.code)
		}
		etags[n] = r.header.Get("ETag")
	}
	st := s.Stats()
	ss := st.Sessions[sess.ID]
	// Four refused PUTs were read whole (up to the drain cap); the reset
	// one only partly.
	if st.PartResets != 1 || st.Faults != 5 || st.Count(RoutePartPut, 0) != 1 || st.Count(RoutePartPut, 500) != 2 ||
		ss.PartPuts != 2 || ss.BytesReceived <= int64(len(data)+4*len(p1)) || ss.BytesReceived >= int64(len(data)+5*len(p1)) {
		t.Errorf("stats %+v session %+v", st, ss)
	}

	// A complete that commits and then answers 502; the repeat says 200.
	s.UpdateFaults(func(f *Faults) { f.UncertainCompletes = 1 })
	r := c.complete(sess.ID, completeBody(etags, 2))
	if r.code != 502 {
		t.Fatalf("uncertain complete: %d %s", r.code, r.body)
	}
	if got := c.getSession(sess.ID); got.Status != "completed" {
		t.Errorf("session behind the 502: %+v", got)
	}
	r = c.complete(sess.ID, completeBody(etags, 2))
	if r.code != 200 || r.json(t)["splatId"] != s.Splats()[0].Hash {
		t.Errorf("replayed complete: %d %s", r.code, r.body)
	}
	if st := s.Stats(); st.Completes != 1 || st.CompleteReplays != 1 || st.V1Splats != 1 || !s.Splats()[0].Uncertain {
		t.Errorf("stats %+v", st)
	}

	// Rates are repeatable for a seed and hit some, not all.
	s.SetFaults(Faults{PartErrorRate: 0.5, ErrorRate: map[string]float64{RouteV1GetUpload: 1}, ErrorStatus: 503})
	if r := c.doV1("GET", "/v1/splats/uploads/"+sess.ID, nil, nil); r.code != 503 {
		t.Errorf("ErrorRate on a v1 route: %d", r.code)
	}
	small := plyBytes(100)
	s2 := c.create("", createBody(small), 201)
	u := c.signParts(s2.ID, 1)[1]
	fails := 0
	for range 40 {
		r, err := c.putRaw(u, small)
		if err != nil {
			t.Fatal(err)
		}
		if r.code == 503 {
			fails++
		}
	}
	if fails < 8 || fails > 32 {
		t.Errorf("%d of 40 failed at rate 0.5", fails)
	}
}

func TestV1ConcurrentCompletesMakeOneSplat(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	data := plyBytes(3 << 20)
	c := newClient(t, s)
	sess := c.create("", createBody(data), 201)
	etags := c.putParts(sess.ID, data, sess.PartSize, 1, 2, 3)
	codes := make(chan int, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := newClient(t, s)
			codes <- c.complete(sess.ID, completeBody(etags, 3)).code
		})
	}
	wg.Wait()
	close(codes)
	var got []int
	for code := range codes {
		got = append(got, code)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{200, 200, 200, 201}) || len(s.Splats()) != 1 {
		t.Errorf("codes %v, %d splats", got, len(s.Splats()))
	}
}

func TestV1ListSplats(t *testing.T) {
	t.Parallel()
	s := newSim(t, Options{ProcessingDelay: -1})
	c := newClient(t, s)
	var ids []string
	for i := range 5 {
		ids = append(ids, c.publishV1("", plyBytes(100+i)))
	}
	// A legacy publish is a splat of the same account.
	key := c.upload("a.ply", plyBytes(50))
	legacy := c.publish(key, map[string]any{"listed": true}).json(t)
	ids = append(ids, legacy["hash"].(string))
	slices.Reverse(ids) // newest first

	type page struct {
		Data       []map[string]any `json:"data"`
		Pagination struct{ Skip, Limit, Total int }
	}
	var got []string
	for skip := 0; ; skip += 4 {
		p := decodeInto[page](t, c.doV1("GET", "/v1/splats?limit=4&skip="+strconv.Itoa(skip), nil, nil))
		if p.Pagination.Skip != skip || p.Pagination.Limit != 4 || p.Pagination.Total != 6 {
			t.Fatalf("pagination %+v", p.Pagination)
		}
		for _, d := range p.Data {
			got = append(got, d["id"].(string))
		}
		if len(p.Data) < 4 {
			break
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("listed %v, want %v", got, ids)
	}
	p := decodeInto[page](t, c.doV1("GET", "/v1/splats", nil, nil))
	if p.Pagination.Limit != 50 || len(p.Data) != 6 || p.Data[0]["visibility"] != "listed" || p.Data[1]["visibility"] != "unlisted" {
		t.Errorf("default page %+v", p)
	}
	if p := decodeInto[page](t, c.doV1("GET", "/v1/splats?skip=100000", nil, nil)); len(p.Data) != 0 || p.Pagination.Total != 6 {
		t.Errorf("far page %+v", p)
	}
	if sp := c.doV1("GET", "/v1/splats/"+ids[0], nil, nil).json(t); sp["status"] != "completed" || sp["format"] != "sog" {
		t.Errorf("legacy splat through v1: %v", sp)
	}
}

func TestV1PartSizeAndRateClasses(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newSim(t, Options{
		Now: clk.Now, PartSize: 5 << 20, Window: 10 * time.Second,
		Limits:  map[Class]int{ClassStrict: 2},
		Classes: map[string]Class{RouteV1CreateUpload: ClassStrict, RouteV1Complete: ClassStrict},
	})
	c := newClient(t, s)
	if sess := c.create("", map[string]any{"sourceFormat": "ply", "contentLength": 10}, 201); sess.PartSize != 5<<20 {
		t.Errorf("partSize %d", sess.PartSize)
	}
	// 25 GB in 5 MiB parts would be 4769 parts: fits.
	r := c.doV1("POST", "/v1/splats/uploads", map[string]any{"sourceFormat": "ply", "contentLength": int64(25000000000)}, nil)
	if limit, rem, _ := rl(t, r); r.code != 201 || limit != 2 || rem != 0 {
		t.Errorf("strict create: %d limit=%d remaining=%d", r.code, limit, rem)
	}
	r = c.doV1("POST", "/v1/splats/uploads", map[string]any{"sourceFormat": "ply"}, nil)
	if r.code != 429 || r.errorText(t) != "Too many requests" || r.header.Get("Retry-After") == "" {
		t.Errorf("over the strict limit: %d %s", r.code, r.body)
	}
	if r := c.doV1("GET", "/v1/me", nil, nil); r.code != 200 {
		t.Errorf("normal class: %d", r.code)
	}

	small := newSim(t, Options{})
	if got := small.partSize(25000000000); got != 3<<20 {
		t.Errorf("partSize for 25 GB at 1 MiB: %d, want 3 MiB", got)
	}
	if _, err := New(Options{PartSize: -1}); err == nil {
		t.Error("negative PartSize accepted")
	}
}

func TestV1StorageAuthorization(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		s := newSim(t, Options{StrictStorageAuth: strict})
		c := newClient(t, s)
		data := plyBytes(100)
		sess := c.create("", createBody(data), 201)
		u := c.signParts(sess.ID, 1)[1]
		req, _ := http.NewRequest("PUT", u, strings.NewReader(string(data)))
		req.Header.Set("Authorization", "Bearer "+s.Token())
		want := 200
		if strict {
			want = 400
		}
		if r := c.send(req); r.code != want {
			t.Errorf("strict=%v: %d %s", strict, r.code, r.body)
		}
		// No Content-Length: refused, as S3 does.
		req, _ = http.NewRequest("PUT", u, io.NopCloser(strings.NewReader(string(data))))
		if r := c.send(req); r.code != 411 {
			t.Errorf("chunked part: %d", r.code)
		}
		if st := s.Stats(); st.StorageAuthHeaders != 1 {
			t.Errorf("StorageAuthHeaders %d", st.StorageAuthHeaders)
		}
	}
}

// TestStorageBandwidthCap measures the cap without wall-clock time: a fake
// clock that only the connections' own waits move, and a no-op Sleep.
func TestStorageBandwidthCap(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	const rate = 4 << 20 // bytes per second per connection
	s := newSim(t, Options{
		Now: clk.Now, StorageBandwidth: rate, URLExpiry: time.Hour,
		Sleep: func(context.Context, time.Duration) error { return nil },
	})
	data := plyBytes(4 << 20)

	// One stream: a legacy PUT of the whole file.
	c := newClient(t, s)
	c.upload("whole.ply", data)
	one := s.Stats().StorageConns
	if len(one) != 1 {
		t.Fatalf("connections %v", one)
	}
	var single ConnStats
	for _, cs := range one {
		single = cs
	}
	want := byteTime(int64(len(data)), rate) // 1 s
	if single.Bytes != int64(len(data)) || single.Waited > want || single.Waited < want-minPace {
		t.Fatalf("single stream: %+v, want about %v waited", single, want)
	}

	// Four parts on four connections at once: each waits a quarter.
	sess := c.create("", createBody(data), 201)
	urls := c.signParts(sess.ID, 1, 2, 3, 4)
	s.ResetStats()
	var wg sync.WaitGroup
	for n := 1; n <= 4; n++ {
		pc := newClient(t, s)
		wg.Go(func() {
			if r, err := pc.putRaw(urls[n], partOf(data, sess.PartSize, n)); err != nil || r.code != 200 {
				t.Errorf("part %d: %v %d", n, err, r.code)
			}
		})
	}
	wg.Wait()
	conns := s.Stats().StorageConns
	if len(conns) != 4 {
		t.Fatalf("connections %v", conns)
	}
	var longest time.Duration
	for id, cs := range conns {
		part := byteTime(sess.PartSize, rate)
		if cs.Bytes != sess.PartSize || cs.Waited > part || cs.Waited < part-minPace {
			t.Errorf("connection %d: %+v, want about %v", id, cs, part)
		}
		longest = max(longest, cs.Waited)
	}
	if ratio := float64(single.Waited) / float64(longest); ratio < 3.9 {
		t.Errorf("four parallel parts finish %.2f× sooner than one stream, want about 4", ratio)
	}

	// Off: no waits at all.
	s.SetStorageBandwidth(0)
	s.ResetStats()
	c.upload("again.ply", data)
	for _, cs := range s.Stats().StorageConns {
		if cs.Waited != 0 {
			t.Errorf("waited %v with no cap", cs.Waited)
		}
	}
}

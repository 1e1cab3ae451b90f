package config

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestFolderConfigProblems: every problem of a watch entry's own blocks,
// filters and the notify keys names its key path.
func TestFolderConfigProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct{ name, yaml, want string }{
		{"folder format", "publish: {format: ply}", "watch[1].publish.format: must be sog or compressed.ply"},
		{"folder encode", "publish: {encode: webp}", "watch[1].publish.encode: must be sog or off"},
		{"folder settings too deep", "publish: {settings: {a: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}}", "watch[1].publish.settings: nested more than 32 levels deep"},
		{"folder title field", "publish: {title: \"{{.Stemm}}\"}", "watch[1].publish.title: template: title:1:2: executing"},
		{"folder title syntax", "publish: {title: \"{{.Stem\"}", "watch[1].publish.title: bad template"},
		{"folder unknown publish key", "publish: {on_uncertain: hold}", "watch[1].publish.on_uncertain: unknown key"},
		{"folder on_success", "after: {on_success: archive}", "watch[1].after.on_success: must be keep, delete or move"},
		{"folder on_failure", "after: {on_failure: delete}", "watch[1].after.on_failure: must be keep or move"},
		{"folder move without dir", "after: {on_success: move}", "watch[1].after.success_dir: is required when on_success is move"},
		{"folder failure move without dir", "after: {on_failure: move}", "watch[1].after.failure_dir: is required when on_failure is move"},
		{"folder dir inside a watch", "after: {on_success: move, success_dir: " + filepath.Join(dir, "a", "done") + "}", "watch[1].after.success_dir: " + filepath.Join(dir, "a", "done") + " is inside watch[0].path"},
		{"folder exec shell line", "after: {exec: [\"notify-chat --room x\"]}", "watch[1].after.exec: a list of the program and its arguments, not a shell line"},
		{"folder exec timeout", "after: {exec_timeout: 0s}", "watch[1].after.exec_timeout: must be positive"},
		{"size unit", "min_size: 3 apples", "watch[1].min_size: \"3 apples\": unknown unit"},
		{"size negative", "max_size: -1", "watch[1].max_size: \"-1\" is not a size"},
		{"size bounds crossed", "{min_size: 2MiB, max_size: 1MiB}", "watch[1].max_size: must be at least min_size (2MiB)"},
		{"age", "min_age: 5", "watch[1].min_age: \"5\" is not a duration"},
		{"age negative", "min_age: -5s", "watch[1].min_age: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			entry := tt.yaml
			if !strings.HasPrefix(entry, "{") {
				entry = "{" + entry + "}"
			}
			entry = strings.TrimSuffix(strings.TrimPrefix(entry, "{"), "}")
			doc := "watch:\n  - path: " + filepath.Join(dir, "a") + "\n  - {path: " + filepath.Join(dir, "b") + ", " + entry + "}\n"
			err := loadFrom(t, doc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("config\n%s\nerror = %v\nwant %q", doc, err, tt.want)
			}
		})
	}
}

func TestNotifyConfigProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	headers := filepath.Join(dir, "headers")
	if err := os.WriteFile(headers, []byte("Host: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ yaml, want string }{
		{"notify: {webhook: \"http://chat.example.com/hook\"}", "notify.webhook: http is allowed only on a loopback address"},
		{"notify: {webhook: \"ftp://chat.example.com/hook\"}", "notify.webhook: scheme must be https"},
		{"notify: {webhook: \"https:///nohost\"}", "notify.webhook: has no host"},
		{"notify: {webhook_headers_file: " + headers + "}", "notify.webhook_headers_file: is set but notify.webhook is not"},
		{"notify: {webhook: \"https://chat.example.com/x\", webhook_headers_file: " + headers + "}", "notify.webhook_headers_file: " + headers + " line 1: Host is set by splatd"},
		{"notify: {webhook: \"https://chat.example.com/x\", webhook_headers_file: " + filepath.Join(dir, "nope") + "}", "notify.webhook_headers_file: open"},
		{"notify: {webhok: x}", "notify.webhok: unknown key"},
		{"after: {exec: [\"\"]}", "after.exec: the first item is the program to run"},
		{"after: {exec: sh}", "after.exec: cannot unmarshal"},
		{"after: {exec_timeout: -1s}", "after.exec_timeout: must be positive"},
	}
	for _, tt := range tests {
		doc := "watch:\n  - path: " + filepath.Join(dir, "a") + "\n" + tt.yaml + "\n"
		if err := loadFrom(t, doc); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config\n%s\nerror = %v\nwant %q", doc, err, tt.want)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:8080/hook", "http://[::1]/x", "http://localhost/x", "https://hooks.example.com/services/T/B/x"} {
		if err := loadFrom(t, "watch:\n  - path: "+filepath.Join(dir, "a")+"\nnotify: {webhook: \""+ok+"\"}\n"); err != nil {
			t.Errorf("webhook %s refused: %v", ok, err)
		}
	}
}

func loadFrom(t *testing.T, doc string) error {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, true)
	return err
}

// TestFolderBlocksOverGlobal: a watch entry's keys replace the global ones
// one by one and its settings merge key by key; other entries keep the
// global values.
func TestFolderBlocksOverGlobal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	cfg, err := Parse([]byte(`
watch:
  - path: ` + filepath.Join(dir, "a") + `
  - path: ` + filepath.Join(dir, "b") + `
    min_size: 1KiB
    max_size: 20GiB
    min_age: 1m
    publish:
      title: "Client B: {{.Stem}}"
      listed: true
      encode: sog
      settings: {camera: {fov: 40}}
    after:
      on_success: move
      success_dir: ` + done + `
      exec: []
publish:
  description: global
  settings: {background: {color: [0, 0, 0]}}
after:
  receipt: false
  exec: [notify-chat, --room, captures]
  exec_timeout: 10s
`))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Validate(true); len(errs) > 0 {
		t.Fatal(errs)
	}
	a, b := cfg.Watch[0], cfg.Watch[1]
	if b.MinSize != 1<<10 || *b.MaxSize != 20<<30 || b.MinAge.D() != time.Minute || a.MinSize != 0 || *a.MaxSize != DefaultMaxSize {
		t.Errorf("filters: a %+v, b %+v", a, b)
	}

	pa, pb := cfg.PublishFor(a), cfg.PublishFor(b)
	if pa.Title != "{{.Stem}}" || pa.Listed || pa.Description != "global" || pa.Format != "sog" || pa.Encode != "" {
		t.Errorf("entry a publish = %+v", pa)
	}
	camB := pb.Settings["camera"].(map[string]any)
	if pb.Title != "Client B: {{.Stem}}" || !pb.Listed || pb.Description != "global" || pb.Format != "sog" || pb.Encode != "sog" ||
		camB["fov"] != 40 || camB["target"] == nil || pb.Settings["background"] == nil {
		t.Errorf("entry b publish = %+v", pb)
	}
	if cfg.Publish.Settings["camera"].(map[string]any)["fov"] != 65 {
		t.Error("a folder's settings leaked into the global ones")
	}

	aa, ab := cfg.AfterFor(a), cfg.AfterFor(b)
	if aa.OnSuccess != "keep" || aa.Receipt || strings.Join(aa.Exec, " ") != "notify-chat --room captures" || aa.ExecTimeout.D() != 10*time.Second {
		t.Errorf("entry a after = %+v", aa)
	}
	if ab.OnSuccess != "move" || ab.SuccessDir != done || ab.Receipt || ab.Exec == nil || len(ab.Exec) != 0 {
		t.Errorf("entry b after = %+v (an empty exec list turns the global command off)", ab)
	}

	// config check shows the folder blocks and hides a webhook's secret path.
	cfg.Notify.Webhook = "https://hooks.example.com/services/T0/B0/SECRET"
	out := cfg.Redacted(nil, nil)
	if strings.Contains(out, "SECRET") || !strings.Contains(out, "https://hooks.example.com/<redacted>") ||
		!strings.Contains(out, "min_size: 1KiB") || !strings.Contains(out, "Client B") {
		t.Errorf("config check output:\n%s", out)
	}
}

func TestByteSizeYAML(t *testing.T) {
	t.Parallel()
	var v struct {
		Max ByteSize `yaml:"max"`
	}
	if err := yaml.Unmarshal([]byte("max: 10M"), &v); err != nil || v.Max != 10<<20 {
		t.Errorf("max: 10M = %d, %v", v.Max, err)
	}
	if err := yaml.Unmarshal([]byte("max: 10Mb"), &v); err == nil || !strings.Contains(err.Error(), "bits") {
		t.Errorf("max: 10Mb: err = %v, want the bits error", err)
	}
	if s := ByteSize(20 << 30).String(); s != "20GiB" {
		t.Errorf("String = %s", s)
	}
}

func TestNotifySecretsRefused(t *testing.T) {
	t.Parallel()
	const tok = "tok-SECRET"
	if err := checkNotifySecrets("https://hooks.example.com/x?key="+tok, nil, tok); err == nil || strings.Contains(err.Error(), tok) {
		t.Errorf("webhook URL with the token: %v", err)
	}
	h := http.Header{"Authorization": {"Bearer " + tok}}
	if err := checkNotifySecrets("https://hooks.example.com/x", h, tok); err == nil || strings.Contains(err.Error(), tok) {
		t.Errorf("header with the token: %v", err)
	}
	if err := checkNotifySecrets("https://hooks.example.com/x", http.Header{"Authorization": {"Bearer other"}}, tok); err != nil {
		t.Errorf("a secret of its own refused: %v", err)
	}
}

func TestWatchOfPicksTheInnermostEntry(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.Watch = []Watch{{Path: "/srv/captures"}, {Path: "/srv/captures/clientA"}, {Path: "/srv/other"}}
	for path, want := range map[string]string{
		"/srv/captures/clientA/x/scan.ply": "/srv/captures/clientA",
		"/srv/captures/scan.ply":           "/srv/captures",
		"/srv/captures-old/scan.ply":       "",
		"/tmp/scan.ply":                    "",
	} {
		w, ok := cfg.WatchOf(path)
		if (want == "") == ok || w.Path != want {
			t.Errorf("watchOf(%s) = %q, %v; want %q", path, w.Path, ok, want)
		}
	}
}

// TestSizeBoundsOfPicksTheInnermostEntry: `splatd publish` holds a file to
// the bounds of the innermost watch entry holding it, and one outside every
// watch folder to the default bound.
func TestSizeBoundsOfPicksTheInnermostEntry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, err := Parse([]byte("watch:\n  - {path: " + filepath.Join(dir, "captures") + ", min_size: 1KiB, max_size: 1MiB}" +
		"\n  - {path: " + filepath.Join(dir, "captures", "big") + ", max_size: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Validate(true); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		path     string
		min, max int64
	}{
		{filepath.Join(dir, "captures", "x", "scan.ply"), 1 << 10, 1 << 20},
		{filepath.Join(dir, "captures", "big", "scan.ply"), 0, 0},
		{filepath.Join(dir, "captures-old", "scan.ply"), 0, 32 << 30},
		{filepath.Join(dir, "scan.ply"), 0, 32 << 30},
	} {
		if minSize, maxSize := cfg.SizeBoundsOf(c.path); minSize != c.min || maxSize != c.max {
			t.Errorf("SizeBoundsOf(%s) = %d, %d; want %d, %d", c.path, minSize, maxSize, c.min, c.max)
		}
	}
}

// TestExampleShowsFolderAndNotifyKeys: the example's watch entry shows the
// filters at their defaults (TestExampleMatchesDefaults compares the rest)
// and every new key is documented.
func TestExampleShowsFolderAndNotifyKeys(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../../../config.example.yaml", true)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Watch[0]; w.MinSize != 0 || *w.MaxSize != DefaultMaxSize || w.MinAge != 0 {
		t.Errorf("example watch entry filters = %+v, want the defaults (off)", w)
	}
	b, err := os.ReadFile("../../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"min_size:", "max_size:", "min_age:", "publish: {", "after: {", ".splat.yaml", "exec: []", "exec_timeout: 30s", "webhook: \"\"", "webhook_headers_file: \"\""} {
		if !strings.Contains(string(b), key) {
			t.Errorf("config.example.yaml does not document %q", key)
		}
	}
}

// TestMaxSizeDefault: a watch entry without max_size skips files above
// DefaultMaxSize; `max_size: 0` still removes the bound, and a min_size
// above the default bound asks for no bound.
func TestMaxSizeDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, err := Parse([]byte("watch:\n  - path: " + filepath.Join(dir, "a") +
		"\n  - path: " + filepath.Join(dir, "b") + "\n    max_size: 0\n  - path: " + filepath.Join(dir, "c") + "\n    min_size: 40GiB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Validate(true); len(errs) > 0 {
		t.Fatal(errs)
	}
	roots := cfg.Roots()
	if got := []int64{roots[0].MaxSize, roots[1].MaxSize, roots[2].MaxSize}; got[0] != 32<<30 || got[1] != 0 || got[2] != 0 {
		t.Errorf("max sizes %v, want [32GiB 0 0]", got)
	}
	// The bounds the worker pool holds a SOG folder's bundle to are the
	// watcher's; a root a reload removed keeps the default bound.
	for i, r := range roots {
		if minSize, maxSize := cfg.SizeBounds(r.Path); minSize != r.MinSize || maxSize != r.MaxSize {
			t.Errorf("SizeBounds(root %d) = %d, %d; the watcher's are %d, %d", i, minSize, maxSize, r.MinSize, r.MaxSize)
		}
	}
	if minSize, maxSize := cfg.SizeBounds(filepath.Join(dir, "gone")); minSize != 0 || maxSize != 32<<30 {
		t.Errorf("SizeBounds(a root not configured) = %d, %d; want 0, 32GiB", minSize, maxSize)
	}
}

package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestInvalidConfigs loads every file in testdata/config; each names the
// message it must produce on its first line ("# want: ...").
func TestInvalidConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/config/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			want := wantLine(t, f)
			_, err := Load(f, true)
			if err == nil {
				t.Fatalf("Load(%s) = nil error, want %q", f, want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("Load(%s) error:\n%v\nwant it to contain %q", f, err, want)
			}
		})
	}
}

func wantLine(t *testing.T, path string) string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "# want: ") {
		t.Fatalf("%s: first line must be '# want: <message>'", path)
	}
	return strings.TrimPrefix(sc.Text(), "# want: ")
}

// TestExampleMatchesDefaults keeps config.example.yaml and the built-in
// defaults in step: the example documents "every key with its default".
func TestExampleMatchesDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../../../config.example.yaml", true)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	def := Default()
	def.Watch = cfg.Watch // the example names a folder; there is no default one
	if errs := def.Validate(false); len(errs) > 0 {
		t.Fatalf("defaults do not validate: %v", errs)
	}
	if !reflect.DeepEqual(normalize(t, cfg), normalize(t, &def)) {
		t.Errorf("config.example.yaml differs from Default():\nexample:  %+v\ndefaults: %+v", *cfg, def)
	}
	w := cfg.Watch[0]
	if !*w.Recursive || w.Mode != "notify" || !reflect.DeepEqual(w.Include, defaultInclude) ||
		!reflect.DeepEqual(w.Exclude, defaultExclude) || w.PollInterval.D() != 10*time.Second {
		t.Errorf("example watch entry does not show the defaults: %+v", w)
	}
}

// normalize compares configs through their YAML form, so that numbers
// decoded from YAML (int) and written in Go (int) compare alike.
func normalize(t *testing.T, c *Config) string {
	t.Helper()
	return c.Redacted(nil, nil)
}

func TestEmptyConfigIsDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("# nothing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workers != 2 || cfg.Settle.D() != 5*time.Second || cfg.Publish.Format != "sog" {
		t.Errorf("empty config did not give the defaults: %+v", cfg)
	}
}

func TestAllProblemsReportedAtOnce(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("workers: 0\npublish: {format: x, encode: zip}\nlog: {level: loud}\n"))
	if err != nil {
		t.Fatal(err)
	}
	errs := cfg.Validate(true)
	for _, key := range []string{"workers:", "publish.format:", "publish.encode:", "log.level:", "watch:"} {
		if !strings.Contains(errs.Error(), key) {
			t.Errorf("errors %q do not mention %s", errs.Error(), key)
		}
	}
}

// TestDeployConfigsLoad keeps the configs shipped in deploy/ valid: the
// container's file and the one inside the Kubernetes ConfigMap.
func TestDeployConfigsLoad(t *testing.T) {
	t.Parallel()
	if _, err := Load("../../../deploy/container/config.yaml", true); err != nil {
		t.Errorf("deploy/container/config.yaml: %v", err)
	}
	raw, err := os.ReadFile("../../../deploy/kubernetes/sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	found := false
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc.Kind != "ConfigMap" || doc.Data["config.yaml"] == "" {
			continue
		}
		found = true
		cfg, err := Parse([]byte(doc.Data["config.yaml"]))
		if err == nil {
			if errs := cfg.Validate(true); len(errs) > 0 {
				err = errs
			}
		}
		if err != nil {
			t.Errorf("sidecar.yaml ConfigMap config.yaml: %v", err)
		}
	}
	if !found {
		t.Error("sidecar.yaml has no ConfigMap with config.yaml")
	}
}

func TestPartialSettingsKeepDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("publish:\n  settings:\n    camera: {fov: 50}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cam := cfg.Publish.Settings["camera"].(map[string]any)
	if cam["fov"] != 50 || cam["target"] == nil || cfg.Publish.Settings["background"] == nil || cfg.Publish.Settings["animTracks"] == nil {
		t.Errorf("settings = %v; want fov 50 over the defaults", cfg.Publish.Settings)
	}
}

// TestDecodeAndValidationProblemsTogether: a file with a bad value and a bad
// key and invalid settings reports all of them in one pass.
func TestDecodeAndValidationProblemsTogether(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("api:\n  base_url: http://x\n  timout: 3s\nsettle: fast\nworkers: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, true)
	for _, want := range []string{"api.timout: unknown key", "settle: \"fast\" is not a duration", "api.base_url: scheme must be https", "workers: must be between 1 and 64", "watch: at least one folder"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestProtocolNotes: under v1, config check names each legacy-only key that
// is set; under legacy, nothing.
func TestProtocolNotes(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("api: {protocol: v1}\npublish: {listed: true, format: compressed.ply, settings: {camera: {fov: 40}}}\n" +
		"watch: [{path: /a}, {path: /b, publish: {listed: false, format: sog, settings: {camera: {fov: 10}}}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(cfg.ProtocolNotes(), "\n")
	for _, key := range []string{"publish.listed", "publish.format", "publish.settings", "watch[1].publish.listed", "watch[1].publish.format", "watch[1].publish.settings"} {
		if !strings.Contains(notes, key+": has no effect") {
			t.Errorf("notes %q do not name %s", notes, key)
		}
	}
	if strings.Contains(notes, "watch[0]") {
		t.Errorf("notes %q name watch[0], which sets no publish key", notes)
	}
	plain, err := Parse([]byte("api: {protocol: v1}\nwatch: [{path: /a, publish: {title: x}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := plain.ProtocolNotes(); len(n) != 0 {
		t.Errorf("v1 with defaults: notes %q, want none", n)
	}
	cfg.API.Protocol = ProtocolLegacy
	if n := cfg.ProtocolNotes(); len(n) != 0 {
		t.Errorf("legacy: notes %q, want none", n)
	}
	for _, bad := range []string{"api: {protocol: v2}", "upload: {parallel_parts: 17}", `upload: {bandwidth: "25:00,off"}`} {
		c, err := Parse([]byte(bad + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if errs := c.Validate(false); len(errs) == 0 {
			t.Errorf("%q passed validation", bad)
		}
	}
}

// TestExcludeAddsToDefaults: a folder's exclude adds to the default
// temporary names; exclude_defaults: false drops them; config check prints
// the effective list.
func TestExcludeAddsToDefaults(t *testing.T) {
	cases := []struct {
		yaml string
		want []string
	}{
		{"watch: [{path: /x}]", defaultExclude},
		{`watch: [{path: /x, exclude: ["*.bak"]}]`, append(slices.Clone(defaultExclude), "*.bak")},
		{`watch: [{path: /x, exclude: ["*.bak", "*.tmp"]}]`, append(slices.Clone(defaultExclude), "*.bak")},
		{`watch: [{path: /x, exclude: ["*.bak"], exclude_defaults: false}]`, []string{"*.bak"}},
		{`watch: [{path: /x, exclude_defaults: false}]`, []string{}},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(c.yaml + "\nstate_dir: /tmp/s\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if errs := cfg.Validate(false); len(errs) > 0 {
			t.Fatalf("%s: %v", c.yaml, errs)
		}
		if got := cfg.Watch[0].Exclude; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: effective exclude %q, want %q", c.yaml, got, c.want)
		}
		out := cfg.Redacted(nil, nil)
		for _, p := range c.want {
			if !strings.Contains(out, p) {
				t.Errorf("%s: config check output lacks %q:\n%s", c.yaml, p, out)
			}
		}
	}
}

// TestBandwidthErrorSaysUnits: a rate without a unit is answered about
// units, under the key, without a doubled prefix.
func TestBandwidthErrorSaysUnits(t *testing.T) {
	for _, in := range []string{`"2"`, `"2 fast"`} {
		cfg, err := Parse([]byte("upload: {bandwidth: " + in + "}\n"))
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprint(cfg.Validate(false))
		if !strings.Contains(msg, "upload.bandwidth: ") || strings.Contains(msg, "bandwidth: bandwidth") ||
			(in == `"2"` && (strings.Count(msg, `"2"`) != 1 || !strings.Contains(msg, "no unit"))) || strings.Contains(msg, "timetable entry is") {
			t.Errorf("bandwidth %s: %s", in, msg)
		}
	}
}

// TestFleetIdentity: fleet.id when set, else the host name and the
// absolute state_dir (distinct for daemons with their own state).
func TestFleetIdentity(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	a := &Config{StateDir: "/var/lib/splatd-a"}
	b := &Config{StateDir: "/var/lib/splatd-b"}
	if got := a.FleetIdentity(); got != host+":/var/lib/splatd-a" || got == b.FleetIdentity() {
		t.Errorf("default identities %q, %q", got, b.FleetIdentity())
	}
	a.Fleet.ID = "rig-1"
	if got := a.FleetIdentity(); got != "rig-1" {
		t.Errorf("fleet.id: identity %q", got)
	}
}

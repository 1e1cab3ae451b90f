package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/splatd/splatd/uploader/sidecar"
)

// Errors is every problem found in a config file, one per key.
type Errors []string

func (e Errors) Error() string {
	if len(e) == 1 {
		return e[0]
	}
	return fmt.Sprintf("%d problems:\n  %s", len(e), strings.Join(e, "\n  "))
}

// Load reads, decodes and validates a config file. forRun adds the
// checks that only the daemon needs (watch folders, state_dir).
func Load(path string, forRun bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: %w\n(give one with -config FILE or $SPLATD_CONFIG; start from config.example.yaml, or run `splatd sim`, which writes a ready one)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	var errs Errors
	switch {
	case errors.As(err, &errs):
		// Keys that decoded are still checked, so that one pass shows
		// every problem (the bad ones keep their defaults meanwhile).
		partial := Default()
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 {
			var ignore Errors
			decodeStrict(doc.Content[0], reflect.ValueOf(&partial).Elem(), "", &ignore)
		}
		errs = append(errs, partial.Validate(forRun)...)
		return nil, fmt.Errorf("config %s: %w", path, errs)
	case err != nil:
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if errs := cfg.Validate(forRun); len(errs) > 0 {
		return nil, fmt.Errorf("config %s: %w", path, errs)
	}
	return cfg, nil
}

// Parse decodes YAML over the defaults. Unknown keys and badly typed
// values are reported with their key path and line.
func Parse(data []byte) (*Config, error) {
	cfg := Default()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &cfg, nil // an empty file: all defaults
	}
	var errs Errors
	decodeStrict(doc.Content[0], reflect.ValueOf(&cfg).Elem(), "", &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	// publish.settings is merged key by key over the default settings, as a
	// sidecar's are over the config's: `settings: {camera: {fov: 50}}`
	// changes the field of view and keeps the rest.
	merged := defaultSettings()
	sidecar.MergeSettings(merged, cfg.Publish.Settings)
	cfg.Publish.Settings = merged
	return &cfg, nil
}

// decodeStrict walks a YAML node into v, refusing keys the struct does not
// have. yaml.v3's KnownFields reports "field x not found in type main.y",
// which names a Go type instead of the key path a user wrote; this walk
// names the path ("watch[1].mode").
func decodeStrict(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	at := func(msg string, line int) {
		p := path
		if p == "" {
			p = "(top level)"
		}
		*errs = append(*errs, fmt.Sprintf("%s: %s (line %d)", p, msg, line))
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(time.Time{}) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.MappingNode {
			at("want a mapping of keys", n.Line)
			return
		}
		fields := map[string]int{}
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = i
			}
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			child := joinPath(path, key.Value)
			idx, ok := fields[key.Value]
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s: unknown key (line %d)", child, key.Line))
				continue
			}
			// A key given twice (a block appended to a file that had it)
			// would have the second replace or merge into the first.
			if first, dup := seen[key.Value]; dup {
				*errs = append(*errs, fmt.Sprintf("%s: given twice (lines %d and %d); keep one", child, first, key.Line))
				continue
			}
			seen[key.Value] = key.Line
			decodeStrict(val, v.Field(idx), child, errs)
		}
		return
	}
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.SequenceNode {
			at("want a list", n.Line)
			return
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			decodeStrict(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i), errs)
		}
		v.Set(out)
		return
	}
	// A leaf (scalar, list of scalars, free-form map such as settings).
	fresh := reflect.New(v.Type())
	if err := n.Decode(fresh.Interface()); err != nil {
		at(cleanYAMLError(err), n.Line)
		return
	}
	v.Set(fresh.Elem())
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// cleanYAMLError turns "yaml: unmarshal errors:\n  line 3: cannot unmarshal
// !!str `x` into int" into "cannot unmarshal !!str `x` into int".
func cleanYAMLError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			msg = rest
		}
		return msg
	}
	return err.Error()
}

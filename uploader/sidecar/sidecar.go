// Package sidecar resolves a file's publish parameters: the configured
// defaults, the title template rendered for the file, and the overrides of
// its sidecar <stem>.splat.yaml. The result is resolved once, when a job
// becomes ready, so that a restarted daemon publishes with the same values.
package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
	"gopkg.in/yaml.v3"
)

// TitleData is what a title template may use.
type TitleData struct {
	Stem    string    // file name without extension
	Name    string    // file name
	Dir     string    // absolute folder of the file
	RelDir  string    // folder relative to the watch root ("." at the root)
	ModTime time.Time // the file's modification time
}

// Overrides is the content of a sidecar file <stem>.splat.yaml beside a
// splat. Every field is optional; settings are merged key by key into the
// config's.
type Overrides struct {
	Title       *string        `yaml:"title,omitempty"`
	Description *string        `yaml:"description,omitempty"`
	Listed      *bool          `yaml:"listed,omitempty"`
	Format      *string        `yaml:"format,omitempty"`
	Settings    map[string]any `yaml:"settings,omitempty"`
	// Encode is "sog" to upload a SOG encoded locally from a PLY, or "off"
	// to upload the file as it is.
	Encode *string `yaml:"encode,omitempty"`
}

// Path is where the sidecar of a splat file lives.
func Path(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".splat.yaml"
}

// Resolve computes one file's publish parameters: the configured defaults t,
// whose Title is a text/template over TitleData (e.g. "{{.Stem}}"), with the
// title rendered for the file and its sidecar applied. An unreadable or
// invalid sidecar is an error naming the sidecar and the key: the job fails
// with it instead of publishing with parameters the user did not intend.
// Files under root are read through fsys (nil: root lies in no other watch
// folder).
func Resolve(fsys *trustfs.FS, t state.PublishParams, path, root string, mod time.Time) (state.PublishParams, error) {
	name := filepath.Base(path)
	data := newTitleData(path, root, mod)
	// Folder settings lie between the configured defaults and the file's
	// own sidecar; a folder title is a template like publish.title.
	t.Settings = deepCopyMap(t.Settings)
	titleFrom := "publish.title"
	folders, err := readFolders(fsys, path, root)
	if err != nil {
		return state.PublishParams{}, err
	}
	for _, f := range folders {
		if f.o.Title != nil {
			t.Title, titleFrom = *f.o.Title, f.path
		}
		t = Apply(t, Overrides{Description: f.o.Description, Listed: f.o.Listed, Format: f.o.Format, Settings: f.o.Settings, Encode: f.o.Encode})
	}
	title := data.Stem
	if t.Title != "" {
		out, err := renderTitle(t.Title, data)
		if err != nil {
			return state.PublishParams{}, fmt.Errorf("%s: %w", titleFrom, err)
		}
		title = strings.TrimSpace(out)
		if title == "" {
			title = data.Stem
		}
	}
	r := state.PublishParams{
		Title:       title,
		Description: t.Description,
		Listed:      t.Listed,
		Format:      t.Format,
		Settings:    t.Settings,
		Encode:      t.Encode,
	}

	sc, err := read(fsys, root, Path(path), "sidecar "+filepath.Base(Path(path)))
	if errors.Is(err, fs.ErrNotExist) {
		sc = Overrides{}
	} else if err != nil {
		return state.PublishParams{}, err
	}
	r = Apply(r, sc)
	r.Title, r.Description = limitParams(r.Title, r.Description)
	// Each file is within the cap; what they make together is stored with
	// the job too.
	if err := CheckSettings(r.Settings); err != nil {
		return state.PublishParams{}, fmt.Errorf("settings of %s (the configured, its folders' and its sidecar's, merged): %w", name, err)
	}
	return r, nil
}

// newTitleData is the title template's data for path under root, modified at
// mod.
func newTitleData(path, root string, mod time.Time) TitleData {
	name := filepath.Base(path)
	data := TitleData{
		Stem:    strings.TrimSuffix(name, filepath.Ext(name)),
		Name:    name,
		Dir:     filepath.Dir(path),
		RelDir:  ".",
		ModTime: mod,
	}
	if root != "" {
		if rel, err := filepath.Rel(root, data.Dir); err == nil {
			data.RelDir = rel
		}
	}
	return data
}

// Apply lays o over p: set fields replace, settings merge key by key into
// p.Settings (which Apply modifies: callers pass a copy). A watch entry's
// publish block is an Overrides too, laid over the global block the same way.
func Apply(p state.PublishParams, o Overrides) state.PublishParams {
	if o.Title != nil {
		p.Title = *o.Title
	}
	if o.Description != nil {
		p.Description = *o.Description
	}
	if o.Listed != nil {
		p.Listed = *o.Listed
	}
	if o.Format != nil {
		p.Format = *o.Format
	}
	if o.Encode != nil {
		p.Encode = EncodeValue(*o.Encode)
	}
	if o.Settings != nil {
		if p.Settings == nil {
			p.Settings = map[string]any{}
		}
		mergeMap(p.Settings, o.Settings)
	}
	return p
}

// Read reads and checks a sidecar file. A missing file is
// fs.ErrNotExist; anything else wrong names the file, and every bad key
// with its line, in one message.
func Read(path string) (Overrides, error) {
	return read(nil, "", path, "sidecar "+filepath.Base(path))
}

// read is Read of a file under the watch folder root (its own folder when
// root is "") with the name its messages give the file. It reads at most
// trustfs.SmallMax bytes, never through a link, a pipe or a device.
func read(fsys *trustfs.FS, root, path, name string) (Overrides, error) {
	var sc Overrides
	b, err := fsys.ReadSmall(root, path, trustfs.SmallMax)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return sc, err
		}
		return sc, fmt.Errorf("%s: %w", name, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return sc, fmt.Errorf("%s: not valid YAML: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return sc, nil // empty: no overrides
	}
	top := doc.Content[0]
	if n := decodedSize(top, MaxDecoded); n > MaxDecoded {
		return sc, fmt.Errorf("%s: decodes to more than %d bytes (its aliases expanded): refused", name, MaxDecoded)
	}
	if top.Kind != yaml.MappingNode {
		return sc, fmt.Errorf("%s: want keys (title, description, listed, format, settings, encode) (line %d)", name, top.Line)
	}
	var problems []string
	bad := func(key string, line int, format string, a ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s (line %d)", key, fmt.Sprintf(format, a...), line))
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		var target any
		switch k.Value {
		case "title":
			target = &sc.Title
		case "description":
			target = &sc.Description
		case "listed":
			target = &sc.Listed
		case "format":
			target = &sc.Format
		case "settings":
			target = &sc.Settings
		case "encode":
			target = &sc.Encode
		default:
			bad(k.Value, k.Line, "unknown key (known: title, description, listed, format, settings, encode)")
			continue
		}
		if err := v.Decode(target); err != nil {
			bad(k.Value, v.Line, "want %s", map[string]string{"title": "text", "description": "text", "listed": "true or false", "format": "sog or compressed.ply", "settings": "a mapping", "encode": "sog or off"}[k.Value])
			continue
		}
		// Settings are stored with the job: what the job record could not
		// hold (or read back) fails this file here, not the queue later.
		if k.Value == "settings" {
			if err := CheckSettings(sc.Settings); err != nil {
				bad(k.Value, v.Line, "%v", err)
				sc.Settings = nil
			}
		}
	}
	if sc.Format != nil && *sc.Format != "sog" && *sc.Format != "compressed.ply" {
		problems = append(problems, fmt.Sprintf("format: must be sog or compressed.ply (got %q)", *sc.Format))
	}
	if sc.Encode != nil && !ValidEncode(*sc.Encode) {
		problems = append(problems, fmt.Sprintf("encode: must be sog or off (got %q)", *sc.Encode))
	}
	if sc.Title != nil && strings.TrimSpace(*sc.Title) == "" {
		problems = append(problems, "title: must not be empty")
	}
	if len(problems) > 0 {
		return sc, fmt.Errorf("%s: %s", name, strings.Join(problems, "; "))
	}
	return sc, nil
}

// MaxDecoded caps what a sidecar or folder settings file decodes to, its
// aliases expanded (decodedSize): as much as the file itself may hold.
const MaxDecoded = trustfs.SmallMax

// decodedSize is the size of the value n decodes to, each alias counted as
// a copy of what it names: one per node, plus the bytes of every scalar. It
// stops counting once past limit (a result over limit), so an alias bomb
// or an alias cycle costs at most limit steps.
func decodedSize(n *yaml.Node, limit int) int {
	size, stack := 0, []*yaml.Node{n}
	for len(stack) > 0 && size <= limit {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil {
			continue
		}
		size += 1 + len(n.Value)
		switch n.Kind {
		case yaml.AliasNode:
			stack = append(stack, n.Alias)
		case yaml.DocumentNode, yaml.SequenceNode, yaml.MappingNode:
			stack = append(stack, n.Content...)
		}
	}
	return size
}

// ValidEncode reports whether v is a value of the encode key: "sog", or
// "off" (or empty) for none.
func ValidEncode(v string) bool { return v == "sog" || v == "off" || v == "" }

// EncodeValue is the PublishParams.Encode of an encode key's value: "off"
// is "".
func EncodeValue(v string) string {
	if v == "off" {
		return ""
	}
	return v
}

// MergeSettings merges src into dst: nested maps key by key, anything else
// replaced. The config uses it to lay publish.settings over the defaults.
func MergeSettings(dst, src map[string]any) { mergeMap(dst, src) }

// mergeMap merges src into dst: nested maps key by key, anything else replaced.
func mergeMap(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeMap(dm, sm)
				continue
			}
			dst[k] = deepCopyMap(sm)
			continue
		}
		dst[k] = v
	}
}

func deepCopyMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sm, ok := v.(map[string]any); ok {
			out[k] = deepCopyMap(sm)
			continue
		}
		out[k] = v
	}
	return out
}

package config

import (
	"reflect"
	"sort"
	"strings"
	"time"
)

// Reloadable reports whether a reload applies key at once; every other
// changed key needs a restart and keeps its old value until then. The
// README's reload section lists what each key's reload does.
func Reloadable(key string) bool {
	return key == "watch" || key == "log.level" || key == "upload.bandwidth" || key == "api.ca_file" ||
		strings.HasPrefix(key, "publish.") || strings.HasPrefix(key, "after.") || strings.HasPrefix(key, "notify.")
}

// ErrorLines splits Load's error into one line per problem.
func ErrorLines(err error) []string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// ChangedKeys lists the config keys (their YAML paths: "api.base_url",
// "watch", "publish.settings") whose values differ between a and b.
func ChangedKeys(a, b *Config) []string {
	ka, kb := configLeaves(a), configLeaves(b)
	var out []string
	for k, va := range ka {
		if !reflect.DeepEqual(va, kb[k]) {
			out = append(out, k)
		}
	}
	for k := range kb {
		if _, ok := ka[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// configLeaves flattens c into its keys: nested sections are walked, every
// other value (lists such as watch, free-form maps such as settings) is one
// key.
func configLeaves(c *Config) map[string]any {
	out := map[string]any{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(time.Time{}) {
			for i := 0; i < v.NumField(); i++ {
				name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
				if name == "" || name == "-" {
					continue
				}
				walk(v.Field(i), joinPath(path, name))
			}
			return
		}
		out[path] = v.Interface()
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return out
}

package config

import (
	"reflect"
	"sort"
	"strings"
	"time"
)

// A reload (SIGHUP, `splatd reload`) reads the config file again. The new
// file is validated as a whole first: an invalid one changes nothing. Then
// the keys below take effect at once; every other key that changed needs a
// restart and keeps its old value until then (a warning names it). Keys
// that other parts of splatd add later fall under "restart" until a reload
// learns to apply them: a change is never silently ignored.
//
// What a reload applies, and how:
//   - watch: the watcher starts a new session over the new folders
//     (Watcher.SetRoots); files already taken are not taken again.
//   - publish.*: jobs that become ready from now on (Pool.SetPublish).
//   - after.*: jobs that finish from now on; after.exec and
//     after.exec_timeout through the notifier (Notifier.SetTarget).
//   - notify.*: events of jobs that finish from now on go to the new
//     webhook, with the headers file read again; events already queued or
//     being delivered keep the webhook they were queued for.
//   - log.level: every logger at once (logOutput.SetLevel).
//   - upload.bandwidth: uploads in flight too (Limiter.SetSchedule).
//   - api.ca_file: new connections (Client.SetRootCAs); its content is also
//     read again every few seconds.
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

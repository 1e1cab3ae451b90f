package sidecar

import (
	"encoding/json"
	"fmt"
)

// MaxSettingsDepth is how deep publish settings may nest mappings and lists,
// the settings' own mapping counting as level 1: ample for real viewer
// settings (an animation track nests six), and far below the JSON decoder's
// 10000 levels, which a stored job record must stay under.
const MaxSettingsDepth = 32

var errTooDeep = fmt.Errorf("nested more than %d levels deep", MaxSettingsDepth)

// MaxSettingsBytes caps settings as a job stores them (JSON): one job's
// record stays small whatever its sidecar says.
const MaxSettingsBytes = 64 << 10

// CheckSettings says what keeps settings from being stored with a job:
// nesting deeper than MaxSettingsDepth, a key that is not text (YAML's
// `{1: x}` below the top), a value JSON cannot hold (.inf, .nan), or more
// than MaxSettingsBytes of JSON; nil when nothing. All settings, from a
// sidecar or the config, pass it before a job stores them.
func CheckSettings(m map[string]any) error {
	if m == nil {
		return nil
	}
	if err := checkValue(m, 1); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("cannot be stored as JSON: %v", err)
	}
	if len(b) > MaxSettingsBytes {
		return fmt.Errorf("%d bytes as a job stores them, more than %d", len(b), MaxSettingsBytes)
	}
	return nil
}

// checkValue walks v, a value at nesting level depth, and stops at the
// first mapping or list past the bound: the walk never goes deeper than
// MaxSettingsDepth+1 levels, however deep v is.
func checkValue(v any, depth int) error {
	switch v := v.(type) {
	case map[string]any:
		if depth > MaxSettingsDepth {
			return errTooDeep
		}
		for _, c := range v {
			if err := checkValue(c, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > MaxSettingsDepth {
			return errTooDeep
		}
		for _, c := range v {
			if err := checkValue(c, depth+1); err != nil {
				return err
			}
		}
	case map[any]any:
		for k := range v {
			return fmt.Errorf("keys must be text (got %v)", k)
		}
	}
	return nil
}

package config

import (
	"fmt"
	"reflect"

	"github.com/splatd/splatd/uploader/api"
)

// The two protocols api.protocol chooses between.
const (
	ProtocolLegacy = "legacy" // docs/api-legacy.md: one signed URL, one PUT, publish
	ProtocolV1     = "v1"     // docs/api-v1.md: resumable multipart upload sessions
)

// validateUpload checks api.protocol and the upload section.
func (c *Config) validateUpload() Errors {
	var errs Errors
	switch c.API.Protocol {
	case ProtocolLegacy, ProtocolV1:
	default:
		errs = append(errs, fmt.Sprintf("api.protocol: must be %s or %s (got %q)", ProtocolLegacy, ProtocolV1, c.API.Protocol))
	}
	if n := c.Upload.ParallelParts; n < 1 || n > 16 {
		errs = append(errs, fmt.Sprintf("upload.parallel_parts: must be between 1 and 16 (got %d)", n))
	}
	if _, err := api.ParseBandwidth(c.Upload.Bandwidth); err != nil {
		errs = append(errs, fmt.Sprintf("upload.bandwidth: %v", err))
	}
	return errs
}

// bandwidth is upload.bandwidth parsed (validate has checked it).
func (c *Config) Bandwidth() api.Schedule {
	s, _ := api.ParseBandwidth(c.Upload.Bandwidth)
	return s
}

// protocolNotes says which keys the chosen protocol ignores, for `config
// check` and the daemon's start: under v1 a splat is uploaded unlisted, with
// no settings and no output-format choice (docs/api-v1.md has no field for them).
func (c *Config) ProtocolNotes() []string {
	if c.API.Protocol != ProtocolV1 {
		return nil
	}
	def := Default()
	var notes []string
	note := func(key string) {
		notes = append(notes, key+": has no effect under api.protocol v1 (a v1 upload is unlisted; its settings and format are edited on the site)")
	}
	if c.Publish.Listed != def.Publish.Listed {
		note("publish.listed")
	}
	if c.Publish.Format != def.Publish.Format {
		note("publish.format")
	}
	if !reflect.DeepEqual(c.Publish.Settings, def.Publish.Settings) {
		note("publish.settings")
	}
	if c.Publish.OnUncertain != def.Publish.OnUncertain {
		notes = append(notes, "publish.on_uncertain: has no effect under api.protocol v1 (a v1 publish has no uncertain outcome)")
	}
	for i, w := range c.Watch {
		key := fmt.Sprintf("watch[%d].publish.", i)
		if w.Publish.Listed != nil {
			note(key + "listed")
		}
		if w.Publish.Format != nil {
			note(key + "format")
		}
		if w.Publish.Settings != nil {
			note(key + "settings")
		}
	}
	return notes
}

package splatfile

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxMeta bounds meta.json; real ones are a few kilobytes (codebooks of 256
// floats), and the bound keeps a hostile archive from costing memory.
const maxMeta = 1 << 20

// sogSections are the meta.json members every SOG has; shN is optional.
var sogSections = []string{"means", "scales", "quats", "sh0"}

// checkSOG opens the ZIP directory (at the end of the file) and reads
// meta.json. A ZIP writer puts the central directory last, so a file that
// starts like a ZIP but has no directory yet is still being written.
func checkSOG(r io.ReaderAt, size int64) (Info, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		if errors.Is(err, zip.ErrFormat) {
			return Info{}, incompletef("ZIP central directory not written yet (%d bytes)", size)
		}
		return Info{}, invalidf("ZIP: %s", oneLine(err))
	}
	if extra, err := zipTrailing(r, size); err != nil {
		return Info{}, err
	} else if extra > 0 {
		return Info{}, invalidf("%d bytes after the ZIP's end record", extra)
	}
	names := make(map[string]bool, len(zr.File))
	var meta *zip.File
	for _, f := range zr.File {
		names[f.Name] = true
		if f.Name == "meta.json" {
			meta = f
		}
	}
	if meta == nil {
		return Info{}, invalidf("no meta.json at the ZIP root")
	}
	if meta.UncompressedSize64 > maxMeta {
		return Info{}, invalidf("meta.json is %d bytes, more than %d", meta.UncompressedSize64, maxMeta)
	}
	rc, err := meta.Open()
	if err != nil {
		return Info{}, invalidf("meta.json: %s", oneLine(err))
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxMeta+1))
	rc.Close()
	if err != nil {
		return Info{}, invalidf("meta.json: %s", oneLine(err))
	}
	n, err := checkMeta(data, names)
	if err != nil {
		return Info{}, err
	}
	return Info{Kind: KindSOG, Encoding: "zip", Vertices: n, Size: size}, nil
}

// zipTrailing returns how many bytes follow the ZIP's end-of-central-
// directory record (and its comment): the record a reader finds by
// scanning back from the end must end the file.
func zipTrailing(r io.ReaderAt, size int64) (int64, error) {
	const eocd = 22
	n := min(size, eocd+0xffff)
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-n); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	for i := len(buf) - eocd; i >= 0; i-- {
		if string(buf[i:i+4]) == "PK\x05\x06" {
			end := i + eocd + int(binary.LittleEndian.Uint16(buf[i+20:]))
			return int64(max(0, len(buf)-end)), nil
		}
	}
	return 0, nil // zip.NewReader found one; nothing to add
}

// sogSection is the part of a meta.json member the check looks at.
type sogSection struct {
	Shape []json.Number `json:"shape"` // version 1 only: [count, ...]
	Files []string      `json:"files"`
}

// checkMeta parses meta.json lightly: a JSON object with the four required
// sections, each naming files that exist in the archive, and a splat count
// from `count` (version 2) or means.shape[0] (version 1).
func checkMeta(data []byte, names map[string]bool) (int64, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return 0, invalidf("meta.json is not a JSON object")
	}
	var count int64 = -1
	if raw, ok := top["count"]; ok {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, invalidf("meta.json: count is not a number")
		}
		c, err := n.Int64()
		if err != nil || c <= 0 {
			return 0, invalidf("meta.json: count %s is not a positive integer", clip(n.String()))
		}
		count = c
	}
	for _, name := range append(sogSections, "shN") {
		raw, ok := top[name]
		if !ok {
			if name == "shN" {
				continue
			}
			return 0, invalidf("meta.json lacks %q", name)
		}
		var s sogSection
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, invalidf("meta.json: %q is not an object with a files list", name)
		}
		if len(s.Files) == 0 {
			return 0, invalidf("meta.json: %q names no files", name)
		}
		for _, f := range s.Files {
			if !names[f] {
				return 0, invalidf("meta.json: %q names %q, which is not in the archive", name, clip(f))
			}
		}
		if name == "means" && count < 0 && len(s.Shape) > 0 {
			if c, err := s.Shape[0].Int64(); err == nil && c > 0 {
				count = c
			}
		}
	}
	if count < 0 {
		count = 0 // version 1 without a shape: unknown, not wrong
	}
	return count, nil
}

// oneLine keeps library error text to one line for `FILE: invalid: REASON`.
func oneLine(err error) string {
	return strings.Join(strings.Fields(fmt.Sprint(err)), " ")
}

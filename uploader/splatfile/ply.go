package splatfile

import (
	"bytes"
	"math"
	"strconv"
	"strings"
)

// maxLine bounds one header line; real lines are under 100 bytes, and a long
// run without a newline after "ply" means binary garbage, not a header.
const maxLine = 4096

// plyTypeSizes maps PLY scalar type names (both spellings) to their size.
var plyTypeSizes = map[string]int64{
	"char": 1, "uchar": 1, "int8": 1, "uint8": 1,
	"short": 2, "ushort": 2, "int16": 2, "uint16": 2,
	"int": 4, "uint": 4, "int32": 4, "uint32": 4,
	"float": 4, "float32": 4,
	"double": 8, "float64": 8,
}

type plyProperty struct {
	name, typ string
	list      bool
}

type plyElement struct {
	name  string
	count int64
	props []plyProperty
}

func (e *plyElement) prop(name string) *plyProperty {
	for i := range e.props {
		if e.props[i].name == name {
			return &e.props[i]
		}
	}
	return nil
}

// stride is the size of one binary record, or -1 if a list property makes
// records variable-sized.
func (e *plyElement) stride() int64 {
	var s int64
	for _, p := range e.props {
		if p.list {
			return -1
		}
		s += plyTypeSizes[p.typ]
	}
	return s
}

type plyHeader struct {
	format   string
	elements []*plyElement
	length   int64 // bytes up to and including the end_header line
}

func (h *plyHeader) element(name string) *plyElement {
	for _, e := range h.elements {
		if e.name == name {
			return e
		}
	}
	return nil
}

// parsePLYHeader parses the header at the start of buf, which holds the first
// min(size, MaxHeader) bytes of a file of the given size. Every complete line
// is validated as it comes, so a broken header is invalid at once, and only a
// header that is correct so far but not finished is incomplete.
func parsePLYHeader(buf []byte, size int64) (*plyHeader, error) {
	h := &plyHeader{}
	var cur *plyElement
	off := 0
	for lineNo := 1; ; lineNo++ {
		i := bytes.IndexByte(buf[off:], '\n')
		if i < 0 {
			rest := buf[off:]
			if err := plausibleText(rest); err != nil {
				return nil, err
			}
			if len(rest) > maxLine {
				return nil, invalidf("header line %d is longer than %d bytes", lineNo, maxLine)
			}
			if size > int64(len(buf)) {
				return nil, invalidf("no end_header in the first %d KiB", MaxHeader>>10)
			}
			if lineNo == 1 {
				return nil, incompletef("only %d bytes written", size)
			}
			return nil, incompletef("header not finished yet (%d bytes, no end_header)", size)
		}
		raw := buf[off : off+i]
		off += i + 1
		if len(raw) > maxLine {
			return nil, invalidf("header line %d is longer than %d bytes", lineNo, maxLine)
		}
		if err := plausibleText(raw); err != nil {
			return nil, err
		}
		line := strings.TrimSuffix(string(raw), "\r")
		f := strings.Fields(line)
		if lineNo == 1 {
			if line != "ply" {
				return nil, invalidf("first line is %q, want \"ply\"", clip(line))
			}
			continue
		}
		if len(f) == 0 {
			continue // tolerated: some writers emit blank lines
		}
		switch f[0] {
		case "comment", "obj_info":
		case "format":
			if h.format != "" {
				return nil, invalidf("line %d: second format line", lineNo)
			}
			if len(f) != 3 || f[2] != "1.0" {
				return nil, invalidf("line %d: bad format line %q", lineNo, clip(line))
			}
			switch f[1] {
			case "ascii", "binary_little_endian", "binary_big_endian":
				h.format = f[1]
			default:
				return nil, invalidf("line %d: unknown format %q", lineNo, clip(f[1]))
			}
		case "element":
			if h.format == "" {
				return nil, invalidf("line %d: element before the format line", lineNo)
			}
			if len(f) != 3 {
				return nil, invalidf("line %d: bad element line %q", lineNo, clip(line))
			}
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || n < 0 {
				return nil, invalidf("line %d: bad count %q for element %q", lineNo, clip(f[2]), clip(f[1]))
			}
			if h.element(f[1]) != nil {
				return nil, invalidf("line %d: element %q declared twice", lineNo, clip(f[1]))
			}
			cur = &plyElement{name: f[1], count: n}
			h.elements = append(h.elements, cur)
		case "property":
			if cur == nil {
				return nil, invalidf("line %d: property before any element", lineNo)
			}
			var p plyProperty
			switch {
			case len(f) == 3:
				p = plyProperty{typ: f[1], name: f[2]}
			case len(f) == 5 && f[1] == "list":
				if _, ok := plyTypeSizes[f[2]]; !ok {
					return nil, invalidf("line %d: unknown list count type %q", lineNo, clip(f[2]))
				}
				p = plyProperty{typ: f[3], name: f[4], list: true}
			default:
				return nil, invalidf("line %d: bad property line %q", lineNo, clip(line))
			}
			if _, ok := plyTypeSizes[p.typ]; !ok {
				return nil, invalidf("line %d: unknown property type %q", lineNo, clip(p.typ))
			}
			if cur.prop(p.name) != nil {
				return nil, invalidf("line %d: property %q declared twice in element %q", lineNo, clip(p.name), clip(cur.name))
			}
			cur.props = append(cur.props, p)
		case "end_header":
			if len(f) != 1 {
				return nil, invalidf("line %d: bad end_header line %q", lineNo, clip(line))
			}
			if h.format == "" {
				return nil, invalidf("no format line")
			}
			h.length = int64(off)
			return h, nil
		default:
			return nil, invalidf("line %d: unknown header line %q", lineNo, clip(line))
		}
	}
}

// plausibleText rejects bytes no PLY header contains, so a file that merely
// starts with "ply\n" but continues as binary is invalid at once instead of
// "incomplete" until it reaches 128 KiB.
func plausibleText(b []byte) error {
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\r' || c == 0x7f {
			return invalidf("binary data in the PLY header (byte 0x%02x)", c)
		}
	}
	return nil
}

// clip keeps quoted header text in a reason short.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// checkPLY validates a PLY whose first bytes are buf: a complete header, the
// layout of a plain or compressed 3DGS file, and for binary encodings a body
// of exactly the declared size.
func checkPLY(buf []byte, size int64) (Info, error) {
	h, err := parsePLYHeader(buf, size)
	if err != nil {
		return Info{}, err
	}
	info := Info{Kind: KindPLY, Encoding: h.format, Size: size}
	if len(h.elements) > 0 && h.elements[0].name == "chunk" {
		info.Kind = KindCompressedPLY
	}
	vertex := h.element("vertex")
	if vertex == nil {
		return Info{}, invalidf("no vertex element")
	}
	if vertex.count == 0 {
		return Info{}, invalidf("vertex element has 0 vertices")
	}
	info.Vertices = vertex.count
	if info.Kind == KindCompressedPLY {
		if err := checkCompressed(h, vertex); err != nil {
			return Info{}, err
		}
	} else {
		for _, name := range []string{"x", "y", "z"} {
			p := vertex.prop(name)
			if p == nil || p.list || (p.typ != "float" && p.typ != "float32") {
				return Info{}, invalidf("vertex element lacks float property %s", name)
			}
		}
	}

	if h.format == "ascii" {
		// An ASCII body has no fixed size; all we can tell is whether it started.
		if size == h.length {
			return Info{}, incompletef("header written, body not started")
		}
		return info, nil
	}
	var body int64
	for _, e := range h.elements {
		s := e.stride()
		if s < 0 {
			return Info{}, invalidf("element %q has a list property: not a splat file (its binary size cannot be checked)", clip(e.name))
		}
		if s != 0 && e.count > (math.MaxInt64-h.length-body)/s {
			return Info{}, invalidf("declared body size overflows (element %q count %d)", clip(e.name), e.count)
		}
		body += e.count * s
	}
	want := h.length + body
	switch {
	case size < want:
		return Info{}, incompletef("body is %d of %d bytes", size-h.length, body)
	case size > want:
		return Info{}, invalidf("file is %d bytes, %d more than its header declares (%d)", size, size-want, want)
	}
	return info, nil
}

// packedVertexProps are the uint properties of a compressed PLY vertex.
var packedVertexProps = []string{"packed_position", "packed_rotation", "packed_scale", "packed_color"}

// checkCompressed checks the PlayCanvas compressed PLY layout: element chunk
// first with 12 or 18 float properties and one record per 256 splats, then
// vertex with four uint packed properties, optionally sh with one uchar
// record per splat.
func checkCompressed(h *plyHeader, vertex *plyElement) error {
	chunk := h.elements[0]
	if n := len(chunk.props); n != 12 && n != 18 {
		return invalidf("compressed PLY: chunk element has %d properties, want 12 or 18", n)
	}
	for _, p := range chunk.props {
		if p.list || (p.typ != "float" && p.typ != "float32") {
			return invalidf("compressed PLY: chunk property %q is not float", clip(p.name))
		}
	}
	for _, name := range packedVertexProps {
		p := vertex.prop(name)
		if p == nil || p.list || (p.typ != "uint" && p.typ != "uint32") {
			return invalidf("compressed PLY: vertex element lacks uint property %s", name)
		}
	}
	if want := (vertex.count + 255) / 256; chunk.count != want {
		return invalidf("compressed PLY: %d chunks for %d vertices, want %d", chunk.count, vertex.count, want)
	}
	if sh := h.element("sh"); sh != nil {
		if sh.count != vertex.count {
			return invalidf("compressed PLY: sh element has %d records for %d vertices", sh.count, vertex.count)
		}
		for _, p := range sh.props {
			if p.list || (p.typ != "uchar" && p.typ != "uint8") {
				return invalidf("compressed PLY: sh property %q is not uchar", clip(p.name))
			}
		}
	}
	return nil
}

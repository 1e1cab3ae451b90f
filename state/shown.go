package state

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Shown is s as every display prints it (`splatd jobs`, logs, the status
// page, the JSON views): control characters, bidi controls (U+202E and the
// other embeddings, overrides and isolates) and bytes that are not UTF-8
// are written as escapes (\n, \x1b, \u202e, \xff). A name is chosen by
// whoever writes to a watch folder; the stored name keeps its bytes.
func Shown(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || isBidi(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r), isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// isBidi reports whether r changes the direction of the text around it.
func isBidi(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

package daemon

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Shown is s as the CLI prints it to a terminal: every control character
// (a newline, an escape that would move the cursor or recolour the screen,
// C1 codes) and every byte that is not UTF-8 is written as an escape
// (\n, \x1b, \u009b). File names and the errors that quote them are chosen
// by whoever writes to a watch folder; the JSON outputs escape them anyway.
func Shown(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
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
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

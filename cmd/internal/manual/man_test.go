package manual

import "testing"

func TestRoffEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"use -probe or --x", `use \-probe or \-\-x`},
		{"read-only (-keep)", `read-only (\-keep)`},
		{`a\b`, `a\eb`},
		{".dot first", `\&.dot first`},
		{"'quote first", `\&'quote first`},
	} {
		if got := roff(tc.in); got != tc.want {
			t.Errorf("roff(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

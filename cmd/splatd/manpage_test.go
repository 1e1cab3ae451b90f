package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestManPageNamesEveryCommandAndFlag: splatd(1) has a section per command
// of the table and an entry per flag, and groff reads it without a warning.
func TestManPageNamesEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	code, page := runInProcess(t, "man")
	if code != exitOK {
		t.Fatalf("splatd man: exit %d", code)
	}
	for _, s := range specs() {
		if !strings.Contains(page, `.SS "\fBsplatd `+s.name+`\fR`) {
			t.Errorf("no section for command %s", s.name)
		}
		for _, f := range s.flags {
			if !strings.Contains(page, `.B \-`+f.name+"\n") && !strings.Contains(page, `.BI \-`+f.name+` "`) {
				t.Errorf("%s: no entry for flag -%s", s.name, f.name)
			}
		}
	}
	for _, want := range []string{".TH SPLATD 1", ".SH NAME", ".SH SYNOPSIS", ".SH FILES", ".SH EXIT STATUS"} {
		if !strings.Contains(page, want) {
			t.Errorf("no %q", want)
		}
	}

	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("no groff to check the markup")
	}
	cmd := exec.Command(groff, "-man", "-ww", "-z", "-Tutf8")
	cmd.Stdin = strings.NewReader(page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, stderr.String())
	}
}

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

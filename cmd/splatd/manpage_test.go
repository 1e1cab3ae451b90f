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
	for _, s := range book().Commands {
		if !strings.Contains(page, `.SS "\fBsplatd `+s.Name+`\fR`) {
			t.Errorf("no section for command %s", s.Name)
		}
		for _, f := range s.Flags {
			if !strings.Contains(page, `.B \-`+f.Name+"\n") && !strings.Contains(page, `.BI \-`+f.Name+` "`) {
				t.Errorf("%s: no entry for flag -%s", s.Name, f.Name)
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

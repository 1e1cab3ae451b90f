package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestParseArgsInterspersed(t *testing.T) {
	t.Parallel()
	c := &cli{stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(string) string { return "" }}
	fs := newFlags(c, "checkpoints")
	all := fs.Bool("all", false, "")
	limit := fs.Int("limit", 0, "")
	pos, err := parseArgs(fs, []string{"main", "-all", "-limit", "7", "--", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	if !*all || *limit != 7 || !reflect.DeepEqual(pos, []string{"main", "-x"}) {
		t.Errorf("got all=%v limit=%d pos=%q", *all, *limit, pos)
	}
}

// TestHelpForms: every way of asking for help prints usage and exits 0,
// including "help help" and "help -h" (which once recursed forever).
func TestHelpForms(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}, {"help", "-h"}, {"help", "publish"}, {"publish", "-h"}} {
		var out, errb strings.Builder
		c := &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := dispatch(context.Background(), c, args); code != exitOK {
			t.Errorf("splatd %v exited %d", args, code)
		}
		if !strings.Contains(out.String()+errb.String(), "usage: splatd") {
			t.Errorf("splatd %v printed no usage", args)
		}
	}
	var out, errb strings.Builder
	c := &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := dispatch(context.Background(), c, []string{"nonsense"}); code != exitUsage {
		t.Errorf("unknown command exited %d, want 2", code)
	}
}

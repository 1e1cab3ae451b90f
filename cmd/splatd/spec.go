package main

import (
	"context"
	"flag"
	"io"
	"strings"

	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/cmd/internal/manual"
)

// book describes every command of the table for the manual (completion
// scripts, man page). Each command's flags come from its real flag set: it is
// run with -h and a cli whose describe hook receives the flag set instead of
// printing the usage, so every command parses its flags before anything else.
func book() manual.Book {
	b := manual.Book{Version: buildVersion(), Values: map[string][]string{"STAGE": strings.Split(daemon.StageNames(), ", ")}}
	for _, cmd := range commands() {
		b.Values["COMMAND"] = append(b.Values["COMMAND"], cmd.name)
		s := manual.Command{Name: cmd.name, Args: cmd.args, Summary: cmd.summary, Runs: cmd.run != nil}
		placeholders := manual.SynopsisValues(cmd.args)
		if cmd.run != nil {
			var fs *flag.FlagSet
			c := &cli{
				stdout: io.Discard, stderr: io.Discard,
				getenv:   func(string) string { return "" }, // documented defaults, not this shell's
				describe: func(f *flag.FlagSet) { fs = f },
			}
			cmd.run(context.Background(), c, []string{"-h"})
			if fs != nil {
				fs.VisitAll(func(f *flag.Flag) {
					s.Flags = append(s.Flags, manual.FlagOf(f, placeholders[f.Name]))
				})
			}
		}
		s.Words, s.Params = manual.SynopsisArgs(cmd.args)
		b.Commands = append(b.Commands, s)
	}
	return b
}

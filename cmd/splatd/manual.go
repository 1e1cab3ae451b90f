package main

import (
	"context"

	"github.com/splatd/splatd/cmd/internal/manual"
)

// cmdCompletion prints a completion script built from the command table and
// each command's flag set (see book), so it never falls behind the CLI.
func cmdCompletion(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "completion")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(c, fs, "give one shell: bash, zsh or fish")
	}
	switch pos[0] {
	case "bash":
		manual.Bash(c.stdout, book())
	case "zsh":
		manual.Zsh(c.stdout, book())
	case "fish":
		manual.Fish(c.stdout, book())
	default:
		return usageError(c, fs, "unknown shell %q: bash, zsh or fish", pos[0])
	}
	return exitOK
}

// cmdMan prints splatd(1) in roff, built from the command table and each
// command's flag set like the completion scripts. `make deb` and `make man`
// install its output; `splatd man | man -l -` reads it in place.
func cmdMan(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "man")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments")
	}
	manual.Man(c.stdout, book())
	return exitOK
}

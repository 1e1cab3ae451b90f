package main

import (
	"context"
	"flag"
	"io"
	"strings"
)

// cmdSpec is a command as the completion scripts and the man page describe
// it: the table's entry, the flags its own flag set defines and what its
// positional arguments are, read from the synopsis.
type cmdSpec struct {
	command
	flags  []flagSpec
	words  []string // literal first arguments: "check", or "bash", "zsh", "fish"
	params []string // placeholders of the other arguments: "FILE...", "ID", "COMMAND"
}

// flagSpec is one flag of a command.
type flagSpec struct {
	name  string
	value string // placeholder of the value ("FILE", "N"); "" for a boolean flag
	usage string
	def   string // the default, "" when it is the zero value
}

// specs describes every command of the table. The flags come from each
// command's real flag set: the command is run with -h and a cli whose
// describe hook receives the flag set instead of printing the usage, so a
// flag added to a command shows in its completion and man page by itself.
// Every command parses its flags before it touches anything else, which is
// what `splatd CMD -h` already relies on.
func specs() []cmdSpec {
	var out []cmdSpec
	for _, cmd := range commands() {
		s := cmdSpec{command: cmd}
		placeholders := synopsisValues(cmd.args)
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
					s.flags = append(s.flags, flagOf(f, placeholders[f.Name]))
				})
			}
		}
		s.words, s.params = synopsisArgs(cmd.args)
		out = append(out, s)
	}
	return out
}

func flagOf(f *flag.Flag, placeholder string) flagSpec {
	fl := flagSpec{name: f.Name, usage: f.Usage}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		fl.value = placeholder
		if fl.value == "" {
			name, _ := flag.UnquoteUsage(f)
			fl.value = strings.ToUpper(name)
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" {
			fl.def = f.DefValue
		}
	}
	return fl
}

// synopsisValues maps each flag that the synopsis shows with a value to the
// value's placeholder: "[-config FILE]" gives config → FILE.
func synopsisValues(synopsis string) map[string]string {
	m := map[string]string{}
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(synopsis))
	for i, f := range fields {
		if strings.HasPrefix(f, "-") && i+1 < len(fields) && isPlaceholder(fields[i+1]) {
			m[strings.TrimLeft(f, "-")] = fields[i+1]
		}
	}
	return m
}

// synopsisArgs splits a synopsis's positional arguments into literal words
// ("check", "bash|zsh|fish") and placeholders ("FILE...", "ID").
func synopsisArgs(synopsis string) (words, args []string) {
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(synopsis))
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.HasPrefix(f, "-") {
			if i+1 < len(fields) && isPlaceholder(fields[i+1]) {
				i++ // the flag's value
			}
			continue
		}
		for _, alt := range strings.Split(f, "|") {
			switch {
			case alt == "" || strings.HasPrefix(alt, "-"):
			case isPlaceholder(alt):
				args = append(args, alt)
			default:
				words = append(words, alt)
			}
		}
	}
	return words, args
}

func isPlaceholder(s string) bool {
	s = strings.TrimSuffix(s, "...")
	return s != "" && strings.ToUpper(s) == s && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == ""
}

// valueKind says what completes a placeholder: "file", "dir", a fixed list
// of words, or nothing ("").
func valueKind(placeholder string) (kind string, words []string) {
	switch strings.TrimSuffix(placeholder, "...") {
	case "FILE":
		return "file", nil
	case "DIR":
		return "dir", nil
	case "STAGE":
		return "words", strings.Split(stageNames(), ", ")
	case "COMMAND":
		for _, c := range commands() {
			words = append(words, c.name)
		}
		return "words", words
	}
	return "", nil
}

// firstSentence shortens a flag's usage for a one-line description.
func firstSentence(s string) string {
	if i := strings.IndexAny(s, "(;"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

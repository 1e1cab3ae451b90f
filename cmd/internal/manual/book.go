// Package manual writes splatd's command-line reference, the man page and
// the bash, zsh and fish completion scripts, from a Book that the command
// builds out of its real flag sets, so neither falls behind the CLI.
package manual

import (
	"flag"
	"strings"
)

// Command is a command as the completion scripts and the man page describe
// it: the table's entry, the flags its own flag set defines and what its
// positional arguments are, read from the synopsis.
type Command struct {
	Name    string
	Args    string // the synopsis after the name
	Summary string
	Runs    bool     // false for help, which the dispatcher answers itself
	Flags   []Flag   // from the command's own flag set (FlagOf)
	Words   []string // literal first arguments: "check", or "bash", "zsh", "fish"
	Params  []string // placeholders of the other arguments: "FILE...", "ID", "COMMAND"
}

// Book is the command line as the manual describes it.
type Book struct {
	Commands []Command
	// Values are the words a placeholder completes to ("STAGE": the stage
	// names, "COMMAND": the commands); FILE and DIR complete to paths.
	Values  map[string][]string
	Version string
}

// Flag is one flag of a command.
type Flag struct {
	Name  string
	Value string // placeholder of the value ("FILE", "N"); "" for a boolean flag
	Usage string
	Def   string // the default, "" when it is the zero value
}

func FlagOf(f *flag.Flag, placeholder string) Flag {
	fl := Flag{Name: f.Name, Usage: f.Usage}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		fl.Value = placeholder
		if fl.Value == "" {
			name, _ := flag.UnquoteUsage(f)
			fl.Value = strings.ToUpper(name)
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" {
			fl.Def = f.DefValue
		}
	}
	return fl
}

// synopsisValues maps each flag that the synopsis shows with a value to the
// value's placeholder: "[-config FILE]" gives config → FILE.
func SynopsisValues(synopsis string) map[string]string {
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
func SynopsisArgs(synopsis string) (words, args []string) {
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
func (b Book) valueKind(placeholder string) (kind string, words []string) {
	switch strings.TrimSuffix(placeholder, "...") {
	case "FILE":
		return "file", nil
	case "DIR":
		return "dir", nil
	}
	if w, ok := b.Values[strings.TrimSuffix(placeholder, "...")]; ok {
		return "words", w
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

package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"strings"
	ttemplate "text/template"
	"text/template/parse"

	"github.com/splatd/splatd/uploader/api"
)

// A title template comes from anyone who writes to the folder, so rendering
// is linear and bounded: loops, template calls and {{call}} are refused, and
// every value a function or .ModTime makes, and the output, is at most
// MaxTitleOutput bytes, before the title is cut to MaxTitle characters.

// The service's limits, applied before parameters are stored or sent.
const (
	MaxTitle       = api.MaxTitleLen       // characters
	MaxDescription = api.MaxDescriptionLen // characters
	// MaxTitleOutput caps a title template's output and every value it
	// makes on the way, in bytes.
	MaxTitleOutput = 4 << 10
)

var (
	errTitleTooLong = fmt.Errorf("title template output is longer than %d bytes", MaxTitleOutput)
	errWidePrintf   = errors.New("title template: printf widths or precisions over 2 digits, or taken from arguments (*), are not allowed")
)

// capped wraps a builtin so that a result longer than MaxTitleOutput is an
// error instead of a value.
func capped(f func(...any) string) func(...any) (string, error) {
	return func(a ...any) (string, error) {
		s := f(a...)
		if len(s) > MaxTitleOutput {
			return "", errTitleTooLong
		}
		return s, nil
	}
}

var titleFuncs = ttemplate.FuncMap{
	"print":   capped(fmt.Sprint),
	"println": capped(fmt.Sprintln),
	"printf": func(format string, a ...any) (string, error) {
		// Widths and precisions make strings of any length before any
		// cap could look: a format may even come from a file's name.
		if hasWidePrintf(format) {
			return "", errWidePrintf
		}
		return capped(func(a ...any) string { return fmt.Sprintf(format, a...) })(a...)
	},
	"html":     capped(func(a ...any) string { return template.HTMLEscapeString(fmt.Sprint(a...)) }),
	"js":       capped(func(a ...any) string { return template.JSEscapeString(fmt.Sprint(a...)) }),
	"urlquery": capped(func(a ...any) string { return template.URLQueryEscaper(a...) }),
}

// parseTitle parses a title template and refuses what could run for long.
func parseTitle(src string) (*ttemplate.Template, error) {
	if len(src) > MaxTitleOutput {
		return nil, fmt.Errorf("title template is longer than %d bytes", MaxTitleOutput)
	}
	t, err := ttemplate.New("title").Option("missingkey=error").Funcs(titleFuncs).Parse(src)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("title template: {{define}} and {{block}} are not allowed")
	}
	if t.Tree != nil && t.Tree.Root != nil {
		if err := checkNode(t.Tree.Root); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// checkNode walks a parsed template for loops, template calls and call.
func checkNode(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		return errors.New("title template: {{range}} is not allowed")
	case *parse.TemplateNode:
		return errors.New("title template: {{template}} is not allowed")
	case *parse.ActionNode:
		return checkNode(n.Pipe)
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode)
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			if err := checkNode(c); err != nil {
				return err
			}
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			if err := checkNode(a); err != nil {
				return err
			}
		}
	case *parse.IdentifierNode:
		if n.Ident == "call" {
			return errors.New("title template: call is not allowed")
		}
	case *parse.ChainNode:
		return checkNode(n.Node)
	case *parse.StringNode:
		if hasWidePrintf(n.Text) {
			return errWidePrintf
		}
	}
	return nil
}

func checkBranch(b *parse.BranchNode) error {
	for _, n := range []parse.Node{b.Pipe, b.List, b.ElseList} {
		if n == nil {
			continue
		}
		if l, ok := n.(*parse.ListNode); ok && l == nil {
			continue
		}
		if err := checkNode(n); err != nil {
			return err
		}
	}
	return nil
}

// hasWidePrintf reports a % verb with a width or precision of 3 digits or
// more, or one taken from an argument (*).
func hasWidePrintf(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if strings.Contains(s[i:], "*") {
			return true
		}
		digits := 0
		for j := i + 1; j < len(s); j++ {
			c := s[j]
			switch {
			case c >= '0' && c <= '9':
				digits++
				if digits >= 3 {
					return true
				}
				continue
			case c == '.' || c == '-' || c == '+' || c == '#' || c == ' ' || c == '[' || c == ']':
				digits = 0
				continue
			}
			break
		}
	}
	return false
}

// limitedBuffer refuses writes past MaxTitleOutput bytes.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxTitleOutput {
		return 0, errTitleTooLong
	}
	return b.Buffer.Write(p)
}

// renderTitle renders a title template for data, bounded as above.
func renderTitle(src string, data TitleData) (string, error) {
	t, err := parseTitle(src)
	if err != nil {
		return "", err
	}
	var b limitedBuffer
	if err := t.Execute(&b, data.bounded()); err != nil {
		return "", err
	}
	return b.String(), nil
}

// ParseTitle says what is wrong with a title template's text (a syntax
// error, or a loop or template call it may not use), nil when nothing.
func ParseTitle(src string) error {
	_, err := parseTitle(src)
	return err
}

// CheckTitle says what is wrong with a title template (nil when it renders
// for a sample file): the config checks publish.title with it.
func CheckTitle(src string) error {
	_, err := renderTitle(src, TitleData{Stem: "scan", Name: "scan.ply", Dir: "/d", RelDir: "."})
	return err
}

// limitParams cuts the title and description to the service's limits.
func limitParams(title, description string) (string, string) {
	return strings.TrimSpace(api.CutRunes(strings.TrimSpace(title), MaxTitle)), api.CutRunes(description, MaxDescription)
}

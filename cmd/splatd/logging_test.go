package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
)

// Under the journal every JSON line starts with its sd-daemon(3) priority,
// which journald strips and files as PRIORITY=.
func TestLogJournalPriorities(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, _ := newLogger(config.Log{Level: "debug", Format: "auto"}, &buf, true)
	log.Debug().Msg("d")
	log.Info().Msg("i")
	log.Warn().Msg("w")
	log.Error().Msg("e")
	log.Log().Msg("n")
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []struct{ prefix, msg string }{{"<7>", "d"}, {"<6>", "i"}, {"<4>", "w"}, {"<3>", "e"}, {"<6>", "n"}}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		rest, ok := strings.CutPrefix(lines[i], w.prefix)
		if !ok {
			t.Errorf("line %d = %q, want prefix %s", i, lines[i], w.prefix)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(rest), &m); err != nil || m["message"] != w.msg {
			t.Errorf("line %d after the prefix = %q (%v), want JSON with message %q", i, rest, err, w.msg)
		}
	}
}

// Away from the journal (a pipe, a file, a container) lines are plain JSON.
func TestLogNoPrefixOffJournal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, _ := newLogger(config.Log{Level: "info", Format: "auto"}, &buf, false)
	log.Warn().Msg("w")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Fatalf("line = %q, want JSON without a prefix", buf.String())
	}
}

// A bidi override or a C1 control in a field or an error is written as
// the text \uXXXX, in JSON (raw and decoded) and on the console; the rest
// of the line, café included, is as it was.
func TestLogEscapesHiddenRunes(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "console"} {
		var buf bytes.Buffer
		log, _ := newLogger(config.Log{Level: "info", Format: format}, &buf, false)
		log.Info().Str("path", "scan\u202egnp.ply").Err(errors.New("open caf\u00e9\u0085.ply")).Msg("file found")
		out := buf.String()
		if strings.ContainsAny(out, "\u202e\u0085") {
			t.Errorf("%s: raw hidden runes in %q", format, out)
		}
		if !strings.Contains(out, "café") {
			t.Errorf("%s: %q lost the é", format, out)
		}
		if format == "console" {
			if !strings.Contains(out, `\u202egnp.ply`) || !strings.Contains(out, `\u0085.ply`) {
				t.Errorf("console: %q does not show the escapes", out)
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("json: %q: %v", out, err)
		}
		if m["path"] != `scan\u202egnp.ply` || m["error"] != `open café\u0085.ply` {
			t.Errorf("json decoded: path %q error %q", m["path"], m["error"])
		}
	}
}

// A reload changes the level of loggers already derived and handed out.
func TestLogLevelChangesEveryCopy(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, out := newLogger(config.Log{Level: "info", Format: "json"}, &buf, false)
	comp := log.With().Str("component", "x").Logger()
	comp.Debug().Msg("hidden")
	if buf.Len() != 0 {
		t.Fatalf("debug written at level info: %q", buf.String())
	}
	out.SetLevel(zerolog.DebugLevel)
	comp.Debug().Msg("shown")
	if !strings.Contains(buf.String(), "shown") {
		t.Fatalf("debug not written after SetLevel(debug): %q", buf.String())
	}
	buf.Reset()
	out.SetLevel(zerolog.ErrorLevel)
	comp.Warn().Msg("hidden")
	if buf.Len() != 0 {
		t.Fatalf("warn written at level error: %q", buf.String())
	}
}

func TestParseJournalStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		dev, ino uint64
		ok       bool
	}{{"8:12345", 8, 12345, true}, {"", 0, 0, false}, {"8", 0, 0, false}, {"x:1", 0, 0, false}} {
		dev, ino, ok := parseJournalStream(tc.in)
		if ok != tc.ok || (ok && (dev != tc.dev || ino != tc.ino)) {
			t.Errorf("parseJournalStream(%q) = %d, %d, %v; want %d, %d, %v", tc.in, dev, ino, ok, tc.dev, tc.ino, tc.ok)
		}
	}
	if onJournal(func(string) string { return "1:2" }, &bytes.Buffer{}) {
		t.Error("onJournal is true for a writer that is not a file")
	}
}

// Durations in logs are seconds with the unit in the field name
// (took_s, retry_in_s): zerolog's Dur writes milliseconds with no unit.
// Every log call in the module's production code is checked.
func TestLogDurationsAreSeconds(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			lit, _ := call.Args[0].(*ast.BasicLit)
			switch sel.Sel.Name {
			case "Dur", "Durs", "TimeDiff":
				t.Errorf("%s: log field via %s: write seconds with Float64(\"NAME_s\", d.Seconds())", fset.Position(call.Pos()), sel.Sel.Name)
			case "Float64":
				if lit != nil && len(call.Args) == 2 {
					if s, ok := call.Args[1].(*ast.CallExpr); ok {
						if m, ok := s.Fun.(*ast.SelectorExpr); ok && m.Sel.Name == "Seconds" && !strings.HasSuffix(lit.Value, `_s"`) {
							t.Errorf("%s: seconds in field %s: name it NAME_s", fset.Position(call.Pos()), lit.Value)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLogSecondsHaveMilliseconds: a duration in seconds is logged with
// three decimals, not nine.
func TestLogSecondsHaveMilliseconds(t *testing.T) {
	var b bytes.Buffer
	log, _ := newLogger(config.Log{Level: "info", Format: "json"}, &b, false)
	log.Info().Float64("took_s", 0.123456789).Msg("x")
	if !strings.Contains(b.String(), `"took_s":0.123,`) {
		t.Errorf("log line %s", b.String())
	}
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/cmd/internal/config"
)

// Seconds and rates in log lines (took_s, retry_in_s, …) carry three
// decimals: milliseconds, not the nine digits of a float64.
func init() { zerolog.FloatingPointPrecision = 3 }

// logOutput is the writer under the daemon's logger. It holds the level, so
// that a reload can change it for every component's copy of the logger at
// once (a zerolog.Logger is a value: each component holds its own), and
// when stderr is the journal it starts each line with its syslog priority
// (sd-daemon(3): "<3>" error, "<4>" warning, "<6>" info, "<7>" debug), which
// journald strips and files as PRIORITY=, so `journalctl -p warning` works.
type logOutput struct {
	w       io.Writer
	journal bool
	level   atomic.Int32 // zerolog.Level
}

// SetLevel changes the lowest level written from now on.
func (o *logOutput) SetLevel(l zerolog.Level) { o.level.Store(int32(l)) }

// Level returns the lowest level written.
func (o *logOutput) Level() zerolog.Level { return zerolog.Level(o.level.Load()) }

// Write writes a line that carries no level (zerolog.Log()).
func (o *logOutput) Write(p []byte) (int, error) { return o.WriteLevel(zerolog.NoLevel, p) }

// WriteLevel implements zerolog.LevelWriter.
func (o *logOutput) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if l != zerolog.NoLevel && l < o.Level() {
		return len(p), nil
	}
	n := len(p)
	p = escapeHidden(p)
	if !o.journal {
		if _, err := o.w.Write(p); err != nil {
			return 0, err
		}
		return n, nil
	}
	// One Write per line, prefix included: lines from concurrent
	// goroutines must not interleave.
	line := make([]byte, 0, len(p)+3)
	line = append(line, '<', '0'+syslogPriority(l), '>')
	line = append(line, p...)
	if _, err := o.w.Write(line); err != nil {
		return 0, err
	}
	return n, nil
}

// escapeHidden rewrites the bidi controls and C1 controls in a JSON log
// line as the text \uXXXX, so that no reader of the log, raw or decoded,
// has its line reordered or its terminal driven by a file's name.
func escapeHidden(p []byte) []byte {
	if bytes.IndexByte(p, 0xc2) < 0 && bytes.IndexByte(p, 0xe2) < 0 && bytes.IndexByte(p, 0xd8) < 0 {
		return p
	}
	var out []byte
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if hidden(r) {
			if out == nil {
				out = append(make([]byte, 0, len(p)+16), p[:i]...)
			}
			out = fmt.Appendf(out, `\\u%04x`, r)
		} else if out != nil {
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if out == nil {
		return p
	}
	return out
}

// hidden reports a rune that changes how a line shows: a bidi control or
// a C1 control.
func hidden(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r)
}

// syslogPriority maps a zerolog level to sd-daemon(3)'s SD_* priorities.
func syslogPriority(l zerolog.Level) byte {
	switch l {
	case zerolog.TraceLevel, zerolog.DebugLevel:
		return 7 // SD_DEBUG
	case zerolog.WarnLevel:
		return 4 // SD_WARNING
	case zerolog.ErrorLevel:
		return 3 // SD_ERR
	case zerolog.FatalLevel, zerolog.PanicLevel:
		return 2 // SD_CRIT
	}
	return 6 // SD_INFO: info and lines without a level
}

// newLogger writes JSON (journald, collectors) or console lines to w;
// "auto" is console on a terminal and JSON anywhere else (systemd, pipes,
// containers). journal says that w is the systemd journal's stream (see
// onJournal): JSON lines then carry their priority prefix. The returned
// logOutput changes the level of every logger derived from the result.
func newLogger(lc config.Log, w io.Writer, journal bool) (zerolog.Logger, *logOutput) {
	level, err := zerolog.ParseLevel(lc.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	out := &logOutput{w: w, journal: journal && lc.Format != "console"}
	if lc.Format == "console" || (lc.Format == "auto" && isTerminal(w) && !journal) {
		out.w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	}
	out.SetLevel(level)
	// The logger passes every level; logOutput filters, so that a reload
	// can lower the level of loggers already handed to components.
	return zerolog.New(out).Level(zerolog.TraceLevel).With().Timestamp().Logger(), out
}

// parseJournalStream parses $JOURNAL_STREAM, "DEVICE:INODE" of the stream
// systemd connected stdout and stderr to.
func parseJournalStream(s string) (dev, ino uint64, ok bool) {
	d, i, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	dev, err1 := strconv.ParseUint(d, 10, 64)
	ino, err2 := strconv.ParseUint(i, 10, 64)
	return dev, ino, err1 == nil && err2 == nil
}

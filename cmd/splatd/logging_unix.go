//go:build unix

package main

import (
	"io"
	"os"
	"syscall"
)

// onJournal reports whether w is the stream systemd connected to the
// journal: $JOURNAL_STREAM names its device and inode, and sd-daemon(3)
// asks to compare them, since a child process may inherit the variable with
// its stderr redirected elsewhere.
func onJournal(getenv func(string) string, w io.Writer) bool {
	dev, ino, ok := parseJournalStream(getenv("JOURNAL_STREAM"))
	if !ok {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

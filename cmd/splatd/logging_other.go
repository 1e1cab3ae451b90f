//go:build !unix

package main

import "io"

// onJournal is false where there is no systemd journal.
func onJournal(func(string) string, io.Writer) bool { return false }

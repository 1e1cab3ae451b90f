package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher"
	"github.com/splatd/splatd/watcher/trustfs"
)

// dryRun is `splatd run -dry-run`: the watcher finds finished files as the
// daemon's would, each is checked and hashed and its publish parameters
// resolved, and one line per file says what would happen. It never touches
// the API (no token is read) and never opens the state: nothing is
// recorded, so it judges every file as a fresh state would (files a daemon
// has already published are listed too). It runs until SIGINT or SIGTERM
// and prints a summary on stdout.
func dryRun(ctx context.Context, c *cli, cfg *Config, log zerolog.Logger) int {
	rescan := cfg.RescanInterval.D()
	if rescan == 0 {
		rescan = -1
	}
	w, err := watcher.New(watcher.Options{
		Roots:          watchRoots(cfg),
		Settle:         max(cfg.Settle.D(), time.Millisecond),
		RescanInterval: rescan,
		Logger:         log.With().Str("component", "watcher").Logger(),
	})
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		return exitFailure
	}
	log.Info().Strs("watch", watchPaths(cfg)).Str("protocol", cfg.API.Protocol).
		Msg("dry run: listing what would be published; no API call, no state written")
	cands := make(chan watcher.Candidate, 64)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, cands) }()

	var s dryRunSummary
	seen := map[string]string{} // sha256 → first path
	for {
		select {
		case <-ctx.Done():
			<-done
			s.print(c.stdout)
			return exitOK
		case err := <-done:
			log.Error().Err(err).Msg("watcher stopped")
			s.print(c.stdout)
			return exitFailure
		case cand := <-cands:
			s.judge(cfg, log, cand, seen)
		}
	}
}

type dryRunSummary struct {
	publish, duplicate, invalid, incomplete int
	bytes                                   int64
}

// judge checks one finished file as a worker would before its upload.
func (s *dryRunSummary) judge(cfg *Config, log zerolog.Logger, c watcher.Candidate, seen map[string]string) {
	ev := func(e *zerolog.Event) *zerolog.Event { return e.Str("path", c.Path).Int64("size", c.Size) }
	info, err := checkIn(c.Root, c.Path)
	if errors.Is(err, splatfile.ErrIncomplete) {
		s.incomplete++
		ev(log.Warn()).Err(err).Msg("dry run: incomplete; the daemon would wait for the rest")
		return
	}
	if err != nil {
		s.invalid++
		ev(log.Warn()).Err(err).Msg("dry run: would fail, never uploaded")
		return
	}
	sum, err := hashFile(c.Root, c.Path)
	if err != nil {
		s.invalid++
		ev(log.Warn()).Err(err).Msg("dry run: cannot read")
		return
	}
	if first, ok := seen[sum]; ok {
		s.duplicate++
		ev(log.Info()).Str("sha256", sum).Str("duplicate_of", first).Msg("dry run: same content as another file; would not be published again")
		return
	}
	seen[sum] = c.Path
	params, err := sidecar.Resolve(cfg.Publish.Params(), c.Path, c.Root, c.ModTime)
	if err != nil {
		s.invalid++
		ev(log.Warn()).Err(err).Msg("dry run: would fail: publish parameters")
		return
	}
	s.publish++
	s.bytes += c.Size
	ev(log.Info()).Str("sha256", sum).Str("title", params.Title).Str("kind", string(info.Kind)).
		Str("format", params.Format).Bool("listed", params.Listed).Msg("dry run: would publish")
}

func (s dryRunSummary) print(w io.Writer) {
	fmt.Fprintf(w, "dry run: %d file(s) would be published (%d bytes), %d duplicate(s), %d invalid, %d incomplete; nothing was sent or recorded\n",
		s.publish, s.bytes, s.duplicate, s.invalid, s.incomplete)
}

// checkIn is splatfile.Check on a file opened through its watch folder
// (trustfs: no link, pipe or device; nothing out of the folder).
func checkIn(root, path string) (splatfile.Info, error) {
	f, _, err := trustfs.OpenRegular(root, path)
	if err != nil {
		return splatfile.Info{}, err
	}
	defer f.Close()
	return splatfile.CheckFile(f, path)
}

func hashFile(root, path string) (string, error) {
	f, _, err := trustfs.OpenRegular(root, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

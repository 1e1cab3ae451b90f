package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/watcher/trustfs"
)

// A fleet's daemons announce themselves in fleetDir at the top of each
// watch folder, one file each, named by member key, holding the nonce of
// the member's start and written every fleetBeat. A file older than
// fleetStale beside this daemon's own (both stamped by the folder's file
// server, whatever the hosts' clocks say) is a member gone.
const (
	fleetDir    = ".splatd-fleet"
	fleetSuffix = ".splatd-peer"
	fleetBeat   = 5 * time.Second
	fleetStale  = 3 * fleetBeat
	fleetReread = time.Second
	fleetMax    = 64 // members read from one folder at most
)

// fleet is uploader.Fleet over the announcement files of the watch folders.
type fleet struct {
	self, nonce string
	roots       func() []string
	now         func() time.Time
	log         zerolog.Logger

	mu   sync.Mutex
	read map[string]fleetView
}

// fleetView is one folder's members as last read.
type fleetView struct {
	members map[string]string
	at      time.Time
}

var _ uploader.Fleet = (*fleet)(nil)

// newFleet is the fleet of the daemon named identity on the roots.
func newFleet(identity string, roots func() []string, now func() time.Time, log zerolog.Logger) *fleet {
	sum := sha256.Sum256([]byte(identity))
	return &fleet{self: hex.EncodeToString(sum[:8]), nonce: strconv.FormatInt(now().UnixNano(), 36),
		roots: roots, now: now, log: log, read: map[string]fleetView{}}
}

// poolFleet is the pool's Fleet: nil without one.
func (d *Daemon) poolFleet() uploader.Fleet {
	if d.fleet == nil {
		return nil
	}
	return d.fleet
}

// Self is this daemon's member key.
func (f *fleet) Self() string { return f.self }

// Members are root's live members, read again at most every fleetReread.
func (f *fleet) Members(root string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.read[root]
	if !ok || f.now().Sub(v.at) >= fleetReread {
		v = fleetView{members: f.readMembers(root), at: f.now()}
		f.read[root] = v
	}
	out := make(map[string]string, len(v.members))
	for k, n := range v.members {
		out[k] = n
	}
	return out
}

// readMembers lists root's announcement files touched within fleetStale;
// anything else in fleetDir is ignored (the folder is not trusted).
func (f *fleet) readMembers(root string) map[string]string {
	out := map[string]string{}
	r, err := trustfs.OpenRoot(root)
	if err != nil {
		return out
	}
	defer r.Close()
	d, err := r.Open(fleetDir)
	if err != nil {
		return out
	}
	defer d.Close()
	entries, err := d.ReadDir(fleetMax)
	if err != nil && !errors.Is(err, io.EOF) {
		return out
	}
	stamps := map[string]time.Time{}
	for _, e := range entries {
		key, ok := strings.CutSuffix(e.Name(), fleetSuffix)
		if !ok || !memberKey(key) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		b, err := trustfs.ReadSmall(root, filepath.Join(root, fleetDir, e.Name()), 64)
		if err != nil {
			continue
		}
		out[key], stamps[key] = strings.TrimSpace(string(b)), fi.ModTime()
	}
	own, ok := stamps[f.self]
	if !ok {
		own = f.now()
	}
	for key, at := range stamps {
		if own.Sub(at) > fleetStale {
			delete(out, key)
		}
	}
	return out
}

// memberKey reports whether s is a member key: 16 lowercase hex digits.
func memberKey(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// announce writes or touches this daemon's file in every watch folder.
func (f *fleet) announce() {
	for _, root := range f.roots() {
		r, err := trustfs.OpenRoot(root)
		if err != nil {
			continue
		}
		if err := r.Mkdir(fleetDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			f.log.Warn().Err(err).Str("folder", root).Msg("cannot announce this daemon to its fleet")
		} else if err := trustfs.WriteAtomic(root, f.file(root), []byte(f.nonce+"\n"), 0o644); err != nil {
			f.log.Warn().Err(err).Str("folder", root).Msg("cannot announce this daemon to its fleet")
		}
		r.Close()
	}
}

// file is this daemon's announcement file in root.
func (f *fleet) file(root string) string { return filepath.Join(root, fleetDir, f.self+fleetSuffix) }

// withdraw removes this daemon's file from every watch folder: its share
// goes to the others at once.
func (f *fleet) withdraw() {
	for _, root := range f.roots() {
		_ = trustfs.RemoveIf(root, f.file(root), trustfs.ID{})
	}
}

// run announces this daemon every fleetBeat until ctx ends, then withdraws.
func (f *fleet) run(ctx context.Context) error {
	t := time.NewTicker(fleetBeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.withdraw()
			return nil
		case <-t.C:
			f.announce()
		}
	}
}

package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/sog"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// The file a job uploads: its own, or, when its publish parameters say
// encode: sog, a SOG encoded locally from its PLY (on a slow uplink a
// fraction of the bytes). The encoding is made once the job's file is
// checked and hashed, kept under PoolOptions.EncodeDir (named by the
// source's sha256 and the job) until the job is final, and recorded in state.Job.Encoded; every
// other record of the job (its sha256, size, dedupe) stays the source's.
// Everything of it lives here; the pipeline calls encodeForUpload after the
// hash (from the descriptor it hashed), uploadFile (jobfile.go) for the bytes
// to send and uploadName for their name.

// Encodes reports whether a file of kind is encoded before upload under the
// publish parameter encode: a plain PLY, when an encoding is asked for (the
// dry run says so with the same rule).
func Encodes(kind splatfile.Kind, encode string) bool {
	return encode != "" && kind == splatfile.KindPLY
}

// encodeForUpload returns the encoding j asks for, made or found again, or
// nil when j uploads its own file (no encode asked, or the file is not a
// plain PLY: a SOG is already one, and a compressed PLY is uploaded as the
// producer made it). changed is the file's new stat when it changed while
// it was encoded.
func (p *Pool) encodeForUpload(ctx context.Context, j state.Job, jf *jobFile) (enc *state.Encoded, changed fs.FileInfo, err error) {
	if !Encodes(splatfile.Kind(j.Kind), j.Params.Encode) {
		return nil, nil, nil
	}
	if j.Params.Encode != "sog" {
		return nil, nil, &workerFileError{fmt.Errorf("publish.encode %q: the only encoding is sog", j.Params.Encode)}
	}
	if p.o.EncodeDir == "" {
		return nil, nil, &workerFileError{errors.New("publish.encode: sog needs a state directory to encode into")}
	}
	// Named by job as well as content: a twin job of the same content,
	// found a duplicate and finished, removes its own encoding only.
	path := filepath.Join(p.o.EncodeDir, fmt.Sprintf("%s-%d.sog", j.SHA256, j.ID))
	if e := j.Encoded; e != nil && e.Path == path {
		if fi, err := os.Stat(path); err == nil && fi.Size() == e.Size {
			return e, nil, nil // made before a retry or restart
		}
	}
	if err := os.MkdirAll(p.o.EncodeDir, 0o700); err != nil {
		return nil, nil, err
	}
	// One encoding at a time: each holds its whole scene in memory (about
	// twice the PLY, sog.PeakMemory) and keeps both cores busy on its own.
	select {
	case p.encodeSlot <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	// Holding the only slot, no encoding has lowered the memory limit.
	if why := encodeTooLarge(jf.f, j); why != "" {
		<-p.encodeSlot
		p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Str("reason", why).
			Msg("publish.encode: sog skipped: uploading the PLY itself")
		return nil, nil, nil
	}
	// Holding the only slot, any partial encoding here is a crash's.
	if stale, _ := filepath.Glob(filepath.Join(p.o.EncodeDir, ".*.tmp")); len(stale) > 0 {
		for _, s := range stale {
			os.Remove(s)
		}
	}
	p.slowEncoder.Do(func() {
		if sog.Interpreted() {
			p.log.Warn().Msg("publish.encode: libwebp runs in wazero's interpreter, many times slower (about 13x): this process may not map executable memory (systemd's MemoryDenyWriteExecute=true); give the unit a drop-in with MemoryDenyWriteExecute=false (README, Formats)")
		}
	})
	m := p.startCheck(j, CheckEncoding, j.Size) // the PLY as the encoder reads it
	_, err = boundedMemory(j.Size, func() (sog.Result, error) {
		return sog.TranscodeTo(ctx, io.TeeReader(io.NewSectionReader(jf.f, 0, j.Size), m), j.Size, path, m.compressing)
	})
	m.stop()
	<-p.encodeSlot
	if err != nil {
		if errors.As(err, new(*sog.FormatError)) {
			return nil, nil, &workerFileError{fmt.Errorf("encode as sog: %w", err)}
		}
		return nil, nil, err // canceled, or the state dir's trouble: retried
	}
	// The source must still be the content hashed, else the SOG is not.
	if fi, err := jf.restat(); err != nil || !fileSame(fi, j) {
		os.Remove(path)
		return nil, fi, err
	}
	sum, size, err := fileSHA256(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	return &state.Encoded{Encoding: "sog", Path: path, Size: size, SHA256: sum}, nil, nil
}

// memoryLimit is the process's memory limit (GOMEMLIMIT, or
// math.MaxInt64 when none is set); a variable for tests.
var memoryLimit = func() int64 { return debug.SetMemoryLimit(-1) }

// encodeHeadroom is what the rest of the daemon is allowed beside an
// encoding under the memory limit.
const encodeHeadroom = 48 << 20

// encodeTooLarge says why j's PLY, open as f, is not to be encoded here,
// or "" when it may be. The encoder holds the whole scene in memory
// (sog.PeakMemory); with a memory limit set (the systemd unit sets
// GOMEMLIMIT=640MiB under MemoryMax=1G) a scene whose encoding would not
// fit under it is uploaded as it is rather than encoded into an
// out-of-memory kill of the daemon, which would then meet the same file
// again at every restart. Without a limit there is no bound.
func encodeTooLarge(f *os.File, j state.Job) string {
	limit := memoryLimit()
	if limit == math.MaxInt64 {
		return ""
	}
	info, err := splatfile.CheckFile(f, j.Path) // its header only
	if err != nil {
		return "" // the encoder reports what is wrong with it
	}
	need := sog.PeakMemory(j.Size, info.Vertices)
	if need <= limit-encodeHeadroom {
		return ""
	}
	return fmt.Sprintf("%d splats need about %s to encode, more than the memory limit (GOMEMLIMIT %s) leaves",
		info.Vertices, state.HumanSize(need), state.HumanSize(limit))
}

// warmEncoder has the SOG encoder's WebAssembly libwebp compiled (once a
// process, about 0.4 s of CPU) on another core while j's file is checked
// and hashed, when j is a new PLY and the global publish.encode is sog. A
// folder's or a sidecar's setting is not looked up here (the folder
// defaults are asked once a job, when its parameters are resolved): such a
// job compiles at its first encoding. It is called from openJob, before
// the hash.
func (p *Pool) warmEncoder(j state.Job) {
	if j.SHA256 != "" || !strings.EqualFold(filepath.Ext(j.Path), ".ply") {
		return // hashed already: encoded before, or not to be
	}
	if p.publish.Load().params.Encode == "sog" {
		go sog.Warm()
	}
}

// uploadName is the file name an upload is signed for: FOLDER.sog for an
// unbundled SOG folder's bundle, the encoding's extension when there is
// one.
func uploadName(j state.Job) string {
	name := folderName(j.Path)
	if j.Encoded != nil {
		name = strings.TrimSuffix(name, filepath.Ext(name)) + "." + j.Encoded.Encoding
	}
	return name
}

// dropEncoded removes a final job's encoding: it is made again if the job
// is ever sent again.
func dropEncoded(j state.Job) {
	if j.Encoded != nil {
		os.Remove(j.Encoded.Path)
	}
}

// fileSHA256 is the sha256 (trustfs.Hash, the one file hash) and size of
// an encoding in the state directory.
func fileSHA256(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	sum, err := trustfs.Hash(ctx, f)
	return sum, fi.Size(), err
}

// TranscodeBounded encodes the PLY at src as a SOG at dst with the garbage collector held
// near the encoding's live memory (about 1.5× the PLY's size) rather than
// letting the heap double first, and returns the memory to the system
// afterwards, so that the daemon does not keep an encoding's peak. A lower
// limit already set (GOMEMLIMIT) is kept.
func TranscodeBounded(ctx context.Context, src, dst string, size int64) (sog.Result, error) {
	return boundedMemory(size, func() (sog.Result, error) { return sog.TranscodeFile(ctx, src, dst) })
}

// boundedMemory runs an encoding of a size-byte PLY with the garbage
// collector held near its live memory (see TranscodeBounded).
func boundedMemory(size int64, encode func() (sog.Result, error)) (sog.Result, error) {
	old := debug.SetMemoryLimit(-1)
	if limit := 2*size + 64<<20; limit < old {
		debug.SetMemoryLimit(limit)
		defer debug.SetMemoryLimit(old)
	}
	defer debug.FreeOSMemory()
	return encode()
}

// uploadContent names the content a job uploads, for its v1
// Idempotency-Key: the source's sha256, with the encoding when there is
// one, so that daemons of a fleet that differ in publish.encode never meet
// in one session with bytes of different lengths.
func uploadContent(j state.Job) string {
	if j.Encoded != nil {
		return j.SHA256 + "-" + j.Encoded.Encoding
	}
	return j.SHA256
}

package content

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

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/sog"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
	"github.com/splatd/splatd/watcher/trustfs"
)

// publish.encode: sog uploads a SOG encoded from the job's PLY, made after
// the hash from the descriptor hashed, kept in Env.EncodeDir until the job is
// final and recorded in state.Job.Encoded; the job's sha256, size and
// dedupe stay the source's (docs/formats.md).

// Encodes reports whether a file of kind is encoded before upload under the
// publish parameter encode: a plain PLY, when an encoding is asked for (the
// dry run says so with the same rule).
func Encodes(kind splatfile.Kind, encode string) bool {
	return encode != "" && kind == splatfile.KindPLY
}

// encodeForUpload returns the encoding j asks for, made or found again, or
// nil when j uploads its own file (no encode asked, or the file is not a
// plain PLY: a SOG is already one, and a compressed PLY is uploaded as the
// producer made it). skipped says why an encoding asked for was not made
// (the file itself is uploaded). changed is the file's new stat when it
// changed while it was encoded.
func (s *Source) encodeForUpload(ctx context.Context, j state.Job, jf *step.File) (enc *state.Encoded, skipped string, changed fs.FileInfo, err error) {
	if !Encodes(splatfile.Kind(j.Kind), j.Params.Encode) {
		return nil, "", nil, nil
	}
	enc, changed, err = s.encodeSOG(ctx, j, jf, &skipped)
	return enc, skipped, changed, err
}

func (s *Source) encodeSOG(ctx context.Context, j state.Job, jf *step.File, skipped *string) (enc *state.Encoded, changed fs.FileInfo, err error) {
	if j.Params.Encode != "sog" {
		return nil, nil, &step.FileError{Err: fmt.Errorf("publish.encode %q: the only encoding is sog", j.Params.Encode)}
	}
	if s.env.EncodeDir == "" {
		return nil, nil, &step.FileError{Err: errors.New("publish.encode: sog needs a state directory to encode into")}
	}
	// Named by job as well as content: a twin job of the same content,
	// found a duplicate and finished, removes its own encoding only.
	path := filepath.Join(s.env.EncodeDir, fmt.Sprintf("%s-%d.sog", j.SHA256, j.ID))
	if e := j.Encoded; e != nil && e.Path == path {
		if fi, err := os.Stat(path); err == nil && fi.Size() == e.Size {
			return e, nil, nil // made before a retry or restart
		}
	}
	if err := os.MkdirAll(s.env.EncodeDir, 0o700); err != nil {
		return nil, nil, err
	}
	// One encoding at a time: each may take the memory limit's share
	// (sog.MinMemory and up) and keeps both cores busy on its own.
	select {
	case s.encodeSlot <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	// Holding the only slot, no encoding has lowered the memory limit.
	memory, why := s.encodeMemory(jf.F, j)
	if why != "" {
		<-s.encodeSlot
		s.env.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("reason", why).
			Msg("publish.encode: sog skipped: uploading the PLY itself")
		*skipped = why
		return nil, nil, nil
	}
	// Holding the only slot, any partial encoding here is a crash's.
	if stale, _ := filepath.Glob(filepath.Join(s.env.EncodeDir, ".*.tmp")); len(stale) > 0 {
		for _, s := range stale {
			os.Remove(s)
		}
	}
	m := s.env.Meter(j, Encoding, j.Size) // the PLY's passes as the encoder reads them
	_, err = boundedMemory(memory, func() (sog.Result, error) {
		return sog.TranscodeTo(ctx, io.NewSectionReader(jf.F, 0, j.Size), j.Size, path, sog.Options{Memory: memory, Progress: m.Encoded})
	})
	m.Stop()
	<-s.encodeSlot
	return encoded(ctx, j, jf, path, err)
}

// encoded is the outcome of the encoding of j at path, which ended with err:
// the encoding, or the source's new stat when it changed meanwhile.
func encoded(ctx context.Context, j state.Job, jf *step.File, path string, err error) (*state.Encoded, fs.FileInfo, error) {
	if err != nil {
		if errors.As(err, new(*sog.FormatError)) {
			return nil, nil, &step.FileError{Err: fmt.Errorf("encode as sog: %w", err)}
		}
		return nil, nil, err // canceled, or the state dir's trouble: retried
	}
	// The source must still be the content hashed, else the SOG is not.
	if fi, err := jf.Restat(); err != nil || !step.IsRecorded(fi, j) {
		os.Remove(path)
		return nil, fi, err
	}
	sum, size, err := fileSHA256(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	return &state.Encoded{Encoding: "sog", Path: path, Size: size, SHA256: sum}, nil, nil
}

// EncodeHeadroom is what the rest of the daemon is allowed beside an
// encoding under the memory limit.
const EncodeHeadroom = 48 << 20

// EncodeMemory is the memory an encoding may take under the process's
// memory limit, or at most max when max > 0 (splatd encode -memory);
// sog.DefaultMemory with neither.
func EncodeMemory(max int64) int64 { return memoryUnder(debug.SetMemoryLimit(-1), max) }

// memoryUnder is EncodeMemory under the memory limit limit.
func memoryUnder(limit, max int64) int64 {
	m := int64(sog.DefaultMemory)
	if limit != math.MaxInt64 {
		m = limit - EncodeHeadroom
	}
	if max > 0 {
		m = min(m, max)
	}
	return m
}

// EncodeTooLarge says why a scene of n splats at bands SH bands is not
// encoded within memory bytes, or "" when it may be: the encoder's least
// memory (sog.MinMemory, a few bytes a splat) is more than the limit
// leaves, and it would run into an out-of-memory kill of the daemon,
// which would then meet the same file again at every restart.
func EncodeTooLarge(n int64, bands int, memory int64) string {
	need := sog.MinMemory(n, bands)
	if need <= memory {
		return ""
	}
	return fmt.Sprintf("%d splats need at least %s to encode, more than the memory limit leaves (%s)",
		n, state.HumanSize(need), state.HumanSize(memory))
}

// encodeMemory is the memory j's encoding may take, or why it is not to
// be encoded here.
func (s *Source) encodeMemory(f *os.File, j state.Job) (int64, string) {
	memory := memoryUnder(s.env.MemoryLimit(), 0)
	info, err := splatfile.CheckFile(f, j.Path) // its header only
	if err != nil {
		return memory, "" // the encoder reports what is wrong with it
	}
	return memory, EncodeTooLarge(info.Vertices, 3, memory)
}

// DropEncoded removes a final job's encoding: it is made again if the job
// is ever sent again.
func DropEncoded(j state.Job) {
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

// TranscodeBounded encodes the PLY at src as a SOG at dst within memory
// bytes (EncodeMemory), with the garbage collector bound to it, and returns
// the memory to the system afterwards.
// A scene that needs more (EncodeTooLarge) is not encoded: the error says
// why.
func TranscodeBounded(ctx context.Context, src, dst string, memory int64) (sog.Result, error) {
	if info, err := splatfile.Check(src); err == nil {
		if why := EncodeTooLarge(info.Vertices, 3, memory); why != "" {
			return sog.Result{}, errors.New(why)
		}
	}
	return boundedMemory(memory, func() (sog.Result, error) {
		return sog.TranscodeFile(ctx, src, dst, sog.Options{Memory: memory})
	})
}

// boundedMemory runs an encoding with the garbage collector's limit at
// most its memory (a lower limit already set is kept), so that the heap
// does not grow to twice what the encoder holds, and frees what it took
// afterwards, so that the daemon does not keep an encoding's peak.
func boundedMemory(memory int64, encode func() (sog.Result, error)) (sog.Result, error) {
	old := debug.SetMemoryLimit(-1)
	if memory < old {
		debug.SetMemoryLimit(memory)
		defer debug.SetMemoryLimit(old)
	}
	defer debug.FreeOSMemory()
	return encode()
}

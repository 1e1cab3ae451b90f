package uploader

import (
	"context"
	"runtime/debug"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/sog"
	"github.com/splatd/splatd/uploader/splatfile"
)

// newContent builds the pool's job content (uploader/content): its check,
// descriptors, encodings and bundles.
func newContent(p *Pool) *content.Source {
	encodeDir, bundleDir := p.o.dirs()
	return content.New(content.Env{
		FS:          p.o.Files.FS(),
		Files:       func() content.Files { return p.publish.Load().files },
		Fleet:       p.fleet,
		Now:         p.o.Now,
		Log:         p.log,
		Settle:      p.o.Timing.Settle,
		UntilDrain:  p.untilDrain,
		Meter:       func(j state.Job, step string, size int64) content.Meter { return p.startCheck(j, step, size) },
		EncodeDir:   encodeDir,
		BundleDir:   bundleDir,
		MemoryLimit: func() int64 { return memoryLimit() },
	})
}

// memoryLimit is the process's memory limit (GOMEMLIMIT, or
// math.MaxInt64 when none is set); a variable for tests.
var memoryLimit = func() int64 { return debug.SetMemoryLimit(-1) }

// OneShotSource is what `splatd publish` sends of one path (content.OneShot).
type OneShotSource = content.OneShot

// PrepareOneShot is content.PrepareOneShot.
func PrepareOneShot(ctx context.Context, path string, minSize, maxSize int64) (*OneShotSource, error) {
	return content.PrepareOneShot(ctx, path, minSize, maxSize)
}

// Encodes is content.Encodes.
func Encodes(kind splatfile.Kind, encode string) bool { return content.Encodes(kind, encode) }

// EncodeMemory is content.EncodeMemory.
func EncodeMemory(max int64) int64 { return content.EncodeMemory(max) }

// TranscodeBounded is content.TranscodeBounded.
func TranscodeBounded(ctx context.Context, src, dst string, memory int64) (sog.Result, error) {
	return content.TranscodeBounded(ctx, src, dst, memory)
}

// PublishedAs is content.PublishedAs.
func PublishedAs(path string) string { return content.PublishedAs(path) }

// PublishedAsIn is content.PublishedAsIn.
func PublishedAsIn(root, path string) string { return content.PublishedAsIn(root, path) }

// BundleOutsideBounds is content.BundleOutsideBounds.
func BundleOutsideBounds(size, minSize, maxSize int64) string {
	return content.BundleOutsideBounds(size, minSize, maxSize)
}

package uploader

import (
	"runtime/debug"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
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

package sog

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname, for libwebpWasm

	_ "github.com/gen2brain/webp" // the WebAssembly libwebp below
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	xwebp "golang.org/x/image/webp"
)

// WebP comes from github.com/gen2brain/webp: libwebp compiled to
// WebAssembly and run by wazero, so pure Go (no cgo) and the same encoder
// splat-transform uses. github.com/HugoSmits86/nativewebp v0.9.3, the
// pure-Go alternative, panicked ("too many bits for the given value") on
// most of the images of a 100,000-splat scene. Method 0 at quality 25 is
// libwebp's fastest lossless effort; measured on those images it took a
// fifth of method 4's time (the default splat-transform uses) for files
// within a few per cent of its size. Exact keeps the colour of pixels
// whose alpha (opacity) is 0.
//
// The package's own Encode instantiates its module afresh for every image
// and wazero grows a new linear memory by appends: for a 1 M-splat SOG
// that was 1.5 GB allocated, copied and page-faulted in for seven images
// (about a second of CPU, most of it the kernel's). So the encoder runs
// the package's WebAssembly (its embedded bytes, linked by name below; a
// version of the module without them fails to link, it cannot run
// something else) through its exported encode function itself, with one
// instance per image goroutine that encodes every image that goroutine
// takes, and is closed when the SOG is done.
const (
	webpMethod  = 0
	webpQuality = 25
)

//go:linkname libwebpWasm github.com/gen2brain/webp.webpWasm
var libwebpWasm []byte

// wasmModule is libwebp compiled for this process, once: to machine code
// where the process may map executable memory, else for wazero's
// interpreter. A process that may not make writable memory executable
// (systemd's MemoryDenyWriteExecute, prctl PR_SET_MDWE) gets a panic from
// wazero's compiler; it is recovered here and the interpreter used, many
// times slower (see docs/formats.md) but the same bytes.
var wasmModule = sync.OnceValues(func() (*compiledWebP, error) {
	c, err := compileWebP(wazero.NewRuntimeConfigCompiler())
	if err != nil {
		c, err = compileWebP(wazero.NewRuntimeConfigInterpreter())
		interpreted.Store(err == nil)
	}
	return c, err
})

// interpreted says wasmModule fell back to the interpreter.
var interpreted atomic.Bool

// Interpreted compiles libwebp if it is not yet and says whether it runs
// in wazero's interpreter (the process may not map executable memory), so
// that the daemon can say why its encodings are slow.
func Interpreted() bool {
	_, _ = wasmModule()
	return interpreted.Load()
}

// compileWebP compiles libwebp for a runtime of cfg, a panic an error.
func compileWebP(cfg wazero.RuntimeConfig) (c *compiledWebP, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("wazero: %v", r)
		}
	}()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(libwebpWasm))
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	code, err := io.ReadAll(zr)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	cm, err := rt.CompileModule(ctx, code)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &compiledWebP{rt: rt, cm: cm}, nil
}

type compiledWebP struct {
	rt wazero.Runtime
	cm wazero.CompiledModule
}

// webpEncoder is one instance of libwebp: one image at a time.
type webpEncoder struct {
	mod                api.Module
	malloc, free, encd api.Function
}

func newWebPEncoder() (*webpEncoder, error) {
	c, err := wasmModule()
	if err != nil {
		return nil, fmt.Errorf("libwebp: %w", err)
	}
	mod, err := c.rt.InstantiateModule(context.Background(), c.cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return nil, fmt.Errorf("libwebp: %w", err)
	}
	e := &webpEncoder{mod: mod, malloc: mod.ExportedFunction("malloc"), free: mod.ExportedFunction("free"), encd: mod.ExportedFunction("encode")}
	if e.malloc == nil || e.free == nil || e.encd == nil {
		mod.Close(context.Background())
		return nil, errors.New("libwebp: the module lacks malloc, free or encode")
	}
	return e, nil
}

func (e *webpEncoder) Close() { e.mod.Close(context.Background()) }

// alloc is malloc(n) inside the instance.
func (e *webpEncoder) alloc(n int) (uint32, error) {
	res, err := e.malloc.Call(context.Background(), uint64(n))
	if err != nil || res[0] == 0 {
		return 0, fmt.Errorf("libwebp: malloc(%d): %v", n, err)
	}
	return uint32(res[0]), nil
}

func (e *webpEncoder) release(p uint32) { e.free.Call(context.Background(), uint64(p)) }

// encode writes img as a lossless WebP: encode(rgba, width, height,
// &size, colorspace 0, quality, method, lossless 1, exact 1) returns a
// buffer of size bytes that the caller frees (gen2brain/webp's lib/webp.c).
func (e *webpEncoder) encode(w io.Writer, img *image.NRGBA) error {
	width, height := img.Rect.Dx(), img.Rect.Dy()
	if img.Stride != 4*width || len(img.Pix) != 4*width*height {
		return errors.New("libwebp: image is not packed")
	}
	in, err := e.alloc(len(img.Pix))
	if err != nil {
		return err
	}
	defer e.release(in)
	if !e.mod.Memory().Write(in, img.Pix) {
		return errors.New("libwebp: writing the image")
	}
	sizeAt, err := e.alloc(8)
	if err != nil {
		return err
	}
	defer e.release(sizeAt)
	res, err := e.encd.Call(context.Background(), uint64(in), uint64(width), uint64(height), uint64(sizeAt), 0, webpQuality, webpMethod, 1, 1)
	if err != nil {
		return fmt.Errorf("libwebp: %w", err)
	}
	out := uint32(res[0])
	if out == 0 {
		return errors.New("libwebp: encoding failed")
	}
	defer e.release(out)
	size, ok := e.mod.Memory().ReadUint32Le(sizeAt) // size_t is 32 bits in wasm32
	if !ok || size == 0 {
		return errors.New("libwebp: no output size")
	}
	b, ok := e.mod.Memory().Read(out, size)
	if !ok {
		return errors.New("libwebp: reading the output")
	}
	_, err = w.Write(b)
	return err
}

// webpPool hands out encoders, making one when none is free, and closes
// them all at the end of a SOG.
type webpPool struct {
	mu   sync.Mutex
	free []*webpEncoder
	all  []*webpEncoder
	// reserve is what a new instance's malloc is asked for once and given
	// back: libwebp's peak for the SOG's largest image. wazero grows a
	// linear memory by appends, so growing it step by step as libwebp
	// asks allocated (and faulted in) about 6.7 times the memory finally
	// used; the C allocator keeps a freed block for the next requests.
	reserve int
}

// webpBytesPerPixel is libwebp's peak memory for a lossless image at
// method 0, measured on images of random pixels from 500×500 to 2000×2000:
// 31.8–32.8 bytes a pixel.
const webpBytesPerPixel = 33

func (p *webpPool) get() (*webpEncoder, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e, nil
	}
	e, err := newWebPEncoder()
	if err != nil {
		return nil, err
	}
	p.all = append(p.all, e)
	if p.reserve > 0 {
		if at, err := e.alloc(p.reserve); err == nil {
			e.release(at)
		}
	}
	return e, nil
}

func (p *webpPool) put(e *webpEncoder) {
	p.mu.Lock()
	p.free = append(p.free, e)
	p.mu.Unlock()
}

func (p *webpPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.all {
		e.Close()
	}
	p.free, p.all = nil, nil
}

// encodeWebP writes img as a lossless WebP with an encoder of pool; an
// encoder that failed is not used again.
func encodeWebP(pool *webpPool, w io.Writer, img *image.NRGBA) error {
	e, err := pool.get()
	if err != nil {
		return err
	}
	if err := e.encode(w, img); err != nil {
		return err
	}
	pool.put(e)
	return nil
}

// Warm has libwebp compiled now (once a process, about half a second of
// CPU) rather than when the first image of the first SOG is ready:
// transcode calls it while the PLY is read, a single-threaded step, and
// the daemon while it hashes a PLY it will encode.
func Warm() { _, _ = wasmModule() }

// decodeWebP reads a WebP with golang.org/x/image/webp: gen2brain/webp
// decodes every WebP through YUV, which is not lossless.
func decodeWebP(r io.Reader) (image.Image, error) { return xwebp.Decode(r) }

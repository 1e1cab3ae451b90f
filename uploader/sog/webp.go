package sog

import (
	"image"
	"io"

	"github.com/gen2brain/webp"
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
var webpOptions = webp.Options{Lossless: true, Method: 0, Quality: 25, Exact: true}

// encodeWebP writes img as a lossless WebP.
var encodeWebP = func(w io.Writer, img *image.NRGBA) error {
	return webp.Encode(w, img, webpOptions)
}

// warmWebP has the WebP encoder compile its WebAssembly (once a process,
// about half a second of CPU) now: transcode calls it while the PLY is
// read, a single-threaded step, rather than when the first image is ready.
func warmWebP() {
	_ = webp.Encode(io.Discard, image.NewNRGBA(image.Rect(0, 0, 4, 4)), webpOptions)
}

// decodeWebP reads a WebP with golang.org/x/image/webp: gen2brain/webp
// decodes every WebP through YUV, which is not lossless.
func decodeWebP(r io.Reader) (image.Image, error) { return xwebp.Decode(r) }

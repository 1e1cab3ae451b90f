package sog

import (
	"image"
	"io"

	xwebp "golang.org/x/image/webp"
)

// decodeWebP reads a WebP with golang.org/x/image/webp (lossless, exact).
func decodeWebP(r io.Reader) (image.Image, error) { return xwebp.Decode(r) }

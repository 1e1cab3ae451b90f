package sog

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
)

// bundle is the SOG's zip: meta.json, then each image as it is made,
// stored (WebP is compressed already) with no timestamps, so equal input
// gives equal bytes.
type bundle struct{ zw *zip.Writer }

func newBundle(w io.Writer, meta *Meta) (*bundle, error) {
	mj, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("sog: meta.json: %w", err)
	}
	b := &bundle{zw: zip.NewWriter(w)}
	return b, b.add("meta.json", mj)
}

func (b *bundle) add(name string, data []byte) error {
	fw, err := b.zw.CreateRaw(&zip.FileHeader{
		Name: name, Method: zip.Store, CRC32: crc32.ChecksumIEEE(data),
		CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
	})
	if err != nil {
		return err
	}
	_, err = fw.Write(data)
	return err
}

func (b *bundle) close() error { return b.zw.Close() }

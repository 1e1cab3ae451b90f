package uploader

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/splatd/splatd/uploader/api"
	v1 "github.com/splatd/splatd/uploader/v1"
)

// peerSession plays another daemon of a fleet on path's content (3 parts):
// it creates the upload session under the Idempotency-Key the job will use
// and returns it, that key, the file's size, and send, which PUTs parts
// from..to and, with the last, completes the session.
func peerSession(t *testing.T, client *api.Client, path string) (s api.UploadSession, key string, size int64, send func(from, to int) error) {
	t.Helper()
	size = fileSize(t, path)
	key = "splatd-" + workerFileSHA(t, path) + "-g0-s1"
	ctx := context.Background()
	s, created, err := client.CreateUpload(ctx, key, api.CreateUploadRequest{SourceFormat: api.SourceFormatPLY, ContentLength: size, Title: "peer"})
	if err != nil || !created {
		t.Fatalf("peer create: %v (created %v)", err, created)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	send = func(from, to int) error {
		var nums []int
		for n := from; n <= to; n++ {
			nums = append(nums, n)
		}
		urls, err := client.PartURLs(ctx, s.ID, nums)
		if err != nil {
			return err
		}
		for _, u := range urls.URLs {
			off, n := v1.PartRange(size, s.PartSize, u.PartNumber)
			if _, err := client.PutPart(ctx, u.URL, io.NewSectionReader(f, off, n), n, nil); err != nil {
				return err
			}
		}
		if to < 3 {
			return nil
		}
		got, err := client.GetUpload(ctx, s.ID)
		if err != nil {
			return err
		}
		var parts []api.CompletedPart
		for _, p := range got.UploadedParts {
			parts = append(parts, api.CompletedPart{PartNumber: p.PartNumber, ETag: p.ETag})
		}
		_, _, err = client.CompleteUpload(ctx, s.ID, parts)
		return err
	}
	return s, key, size, send
}

// runPool runs a pool of o until the test ends, and fails the test if its
// Run returns an error.
func runPool(t *testing.T, o PoolOptions) *Pool {
	t.Helper()
	pool, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return pool
}

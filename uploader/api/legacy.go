package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// SignedURL asks for a signed upload URL for fileName (a name with its
// extension, e.g. "scan.ply"). The key comes back under storageKey or s3Key;
// Upload.KeyField remembers which so Publish can echo it. A response with
// neither, or without a URL, is a *ProtocolError.
func (c *Client) SignedURL(ctx context.Context, fileName string) (Upload, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/api/upload/signed-url", nil, map[string]string{"fileName": fileName})
	if err != nil {
		return Upload{}, err
	}
	var w wireSigned
	if err := c.do(ctx, RouteSignedURL, req, &w); err != nil {
		return Upload{}, err
	}
	up := Upload{URL: strings.TrimSpace(string(w.SignedURL)), IssuedAt: c.now()}
	switch {
	case w.StorageKey != nil && *w.StorageKey != "":
		up.Key, up.KeyField = string(*w.StorageKey), KeyFieldStorageKey
	case w.S3Key != nil && *w.S3Key != "":
		up.Key, up.KeyField = string(*w.S3Key), KeyFieldS3Key
	default:
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "no storageKey or s3Key"}
	}
	if up.URL == "" {
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "no signedUrl"}
	}
	if u, err := url.Parse(up.URL); err != nil || !u.IsAbs() || u.Host == "" {
		return Upload{}, &ProtocolError{Route: RouteSignedURL, Reason: "signedUrl is not an absolute URL"}
	}
	return up, nil
}

// Publish starts processing of an uploaded file. The key is sent under the
// field name it arrived with. If the server answers 2xx without a splat id,
// Publish returns the decoded record together with a *ProtocolError: the
// splat probably exists, so a caller must not simply publish again.
func (c *Client) Publish(ctx context.Context, r PublishRequest) (Splat, error) {
	field := r.KeyField
	if field == "" {
		field = KeyFieldStorageKey
	}
	if field != KeyFieldStorageKey && field != KeyFieldS3Key {
		return Splat{}, fmt.Errorf("%s: unknown key field %q (want %s or %s)", RoutePublish, field, KeyFieldStorageKey, KeyFieldS3Key)
	}
	if r.Key == "" {
		return Splat{}, fmt.Errorf("%s: empty storage key", RoutePublish)
	}
	body := map[string]any{
		field:         r.Key,
		"title":       r.Title,
		"description": r.Description,
		"listed":      r.Listed,
	}
	if r.Format != "" {
		body["format"] = r.Format
	}
	if r.Settings != nil {
		body["settings"] = r.Settings
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/api/splats/publish", nil, body)
	if err != nil {
		return Splat{}, err
	}
	var w wireSplat
	if err := c.do(ctx, RoutePublish, req, &w); err != nil {
		return Splat{}, err
	}
	s := w.splat()
	if s.ID == "" {
		return s, &ProtocolError{Route: RoutePublish, Reason: "no splat id in the publish response (the splat may exist)"}
	}
	return s, nil
}

// Splat fetches a splat record, to poll its processing task.
func (c *Client) Splat(ctx context.Context, id string) (Splat, error) {
	if strings.TrimSpace(id) == "" {
		return Splat{}, fmt.Errorf("%s: empty splat id", RouteGetSplat)
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/splats/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return Splat{}, err
	}
	var w wireSplat
	if err := c.do(ctx, RouteGetSplat, req, &w); err != nil {
		return Splat{}, err
	}
	return w.splat(), nil
}

// Checkpoints lists one page of branch's checkpoints, newest first. limit 0
// leaves the server's default; skip is the id of the last checkpoint of the
// previous page ("" for the first page).
func (c *Client) Checkpoints(ctx context.Context, branch string, limit int, skip string) (CheckpointPage, error) {
	if strings.TrimSpace(branch) == "" {
		return CheckpointPage{}, fmt.Errorf("%s: empty branch id", RouteCheckpoints)
	}
	if limit < 0 {
		return CheckpointPage{}, fmt.Errorf("%s: negative limit %d", RouteCheckpoints, limit)
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if skip != "" {
		q.Set("skip", skip)
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/branches/"+url.PathEscape(branch)+"/checkpoints", q, nil)
	if err != nil {
		return CheckpointPage{}, err
	}
	var w wireCheckpointPage
	if err := c.do(ctx, RouteCheckpoints, req, &w); err != nil {
		return CheckpointPage{}, err
	}
	page := CheckpointPage{Checkpoints: make([]Checkpoint, 0, len(w.Result)), HasMore: bool(w.Pagination.HasMore)}
	for i, raw := range w.Result {
		var wc wireCheckpoint
		if err := json.Unmarshal(raw, &wc); err != nil {
			return CheckpointPage{}, &ProtocolError{Route: RouteCheckpoints, Reason: "checkpoint " + strconv.Itoa(i) + " is not an object", Err: err}
		}
		page.Checkpoints = append(page.Checkpoints, wc.checkpoint())
	}
	return page, nil
}

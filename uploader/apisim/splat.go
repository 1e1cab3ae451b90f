package apisim

import (
	"strconv"
	"time"
)

// splat is the stored record. Its task status is derived from the clock
// (running until doneAt), so no goroutine is needed to advance it.
type splat struct {
	id          int
	hash        string
	title       string
	description string
	listed      bool
	format      string
	settings    map[string]any
	key         string
	sha256      string
	size        int64
	createdAt   time.Time
	doneAt      time.Time
	failMsg     string // non-empty: processing ends "failed" with it
	uncertain   bool
	uploadID    string // v1: the session that made it; "" for a legacy publish
	s3Key       string // the object's key in the bucket, with Options.S3
}

// viewerURL is the link of the record: a v1 splat's viewerUrl, else the
// legacy url.
func (sp *splat) viewerURL(o Options) string {
	if sp.uploadID != "" {
		return o.ViewerURL + "/scene/" + sp.hash
	}
	return o.ViewerURL + "/view?id=" + sp.hash
}

func (sp *splat) protocol() string {
	if sp.uploadID != "" {
		return "v1"
	}
	return "legacy"
}

func (sp *splat) idString() string { return strconv.Itoa(sp.id) }

// state returns task status and message, and the completion time if terminal.
func (sp *splat) state(now time.Time, o Options) (status, msg string, done *time.Time) {
	if now.Before(sp.doneAt) {
		return "running", "", nil
	}
	t := sp.doneAt
	if sp.failMsg != "" {
		return "failed", sp.failMsg, &t
	}
	return o.SuccessStatus, "", &t
}

func (sp *splat) record(now time.Time, o Options) SplatRecord {
	status, msg, done := sp.state(now, o)
	return SplatRecord{
		ID: sp.idString(), Hash: sp.hash, Protocol: sp.protocol(), UploadID: sp.uploadID, URL: sp.viewerURL(o),
		Title: sp.title, Description: sp.description, Listed: sp.listed, Format: sp.format,
		Settings: sp.settings, Key: sp.key, ObjectSHA256: sp.sha256, Size: sp.size,
		Status: status, Message: msg, Uncertain: sp.uncertain, CreatedAt: sp.createdAt, CompletedAt: done,
		S3Key: sp.s3Key,
	}
}

// json renders the record with the field shapes of docs/api-legacy.md's Splat
// table (or the AltFields spellings).
//
// The publish answer (created=true) always says "running", even with no
// processing delay, as docs/api-legacy.md observes.
func (sp *splat) json(now time.Time, o Options, created bool) map[string]any {
	status, msg, done := sp.state(now, o)
	if created {
		status, msg, done = "running", "", nil
	}
	var id any = sp.idString()
	if o.NumericIDs {
		id = sp.id
	}
	format, size, version, thumbs := "", int64(0), 0, false
	var completedAt any // JSON null while running or failed
	modified := sp.createdAt
	if done != nil {
		modified = *done
		if sp.failMsg == "" {
			format, size, version, thumbs = sp.format, sp.size, 1, true
			completedAt = isoTime(*done)
		}
	}
	m := map[string]any{
		"id":             id,
		"hash":           sp.hash,
		"title":          sp.title,
		"description":    sp.description,
		"format":         format,
		"currentVersion": 1,
		"size":           size,
		"views":          0,
		"comments":       0,
		"starred":        0,
		"featuredWeight": 0,
		"listed":         sp.listed,
		"tags":           []string{},
		"task":           map[string]string{"status": status, "message": msg},
		"url":            o.ViewerURL + "/view?id=" + sp.hash,
		"userId":         o.UserID,
		"completedAt":    completedAt,
		"createdAt":      isoTime(sp.createdAt),
		"modifiedAt":     isoTime(modified),
	}
	if o.AltFields {
		m["version"] = strconv.Itoa(version)
		m["release_notes"] = nil
		m["thumbnails"] = map[bool]int{false: 0, true: 1}[thumbs]
	} else {
		m["version"] = version
		m["releaseNotes"] = nil
		m["hasThumbnails"] = thumbs
	}
	return m
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// addSplat records a new splat, whose processing fails with badContent
// unless its content is ok (or by the fault rate). Callers hold s.mu.
func (s *Server) addSplat(sp *splat, ok bool, badContent string) {
	switch {
	case !ok:
		sp.failMsg = badContent
	case s.roll(s.faults.ProcessingFailRate):
		sp.failMsg = "processing failed: conversion error (simulated)"
	}
	s.splats = append(s.splats, sp)
	s.byHash[sp.hash] = sp
	if s.published[sp.sha256] > 0 {
		s.stats.Duplicates++
	}
	s.published[sp.sha256]++
	s.pubBytes += sp.size
}

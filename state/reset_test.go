package state

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// fullJob is a job with every field set, as a job that went far would be.
func fullJob(stage Stage) Job {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Job{
		V: 2, ID: 7, Path: "/in/a.ply", Root: "/in", Size: 10, ModTime: t0, Dev: 1, Ino: 2,
		SHA256: "ab", Kind: "ply", Stage: stage, Attempts: 3, NextAttempt: t0, CreatedAt: t0,
		UpdatedAt: t0, StageSince: t0, Uncertain: true, Resigns: 1, Publishes: 2, Finalized: true,
		Upload: Upload{URL: "u", Key: "k"}, Params: PublishParams{Title: "a"},
		Encoded: &Encoded{Encoding: "sog", Path: "/state/x.sog"}, Protocol: ProtocolV1, Generation: 1,
		V1: &Session{Attempt: 1, Key: "key"}, SplatID: "s", SplatHash: "h", ViewerURL: "v",
		TaskStatus: "done", TaskMessage: "m", PublishedAt: &t0, CompletedAt: &t0, Parked: "peer",
		RateLimited: &RateWait{Class: "strict"}, LastError: "e", LastStatus: 503, FailReason: "f",
		DuplicateOf: 9, Adopted: true, AfterAction: "move", AfterError: "ae", AfterAttempts: 1, AfterRetry: t0,
	}
}

// TestReset is the table of what each move back keeps of a job's record;
// every field not listed as kept is cleared (Stage, Attempts, the times
// and Generation are checked apart).
func TestReset(t *testing.T) {
	t.Parallel()
	identity := []string{"V", "ID", "Path", "Root", "Size", "ModTime", "CreatedAt", "Params"}
	for _, tc := range []struct {
		name    string
		from    Stage
		why     Reset
		splat   bool // the job had made a splat
		to      Stage
		newGen  bool
		kept    []string
		refused bool
	}{
		{name: "retry of a failed job keeps its v1 session", from: Failed, why: ResetRetry, to: Queued,
			kept: []string{"Protocol", "V1", "Publishes", "DuplicateOf"}},
		{name: "retry of a canceled job", from: Canceled, why: ResetRetry, to: Queued,
			kept: []string{"Protocol", "V1", "Publishes", "DuplicateOf"}},
		{name: "retry of a failed job that made a splat is a republish", from: Failed, why: ResetRetry, splat: true, to: Queued, newGen: true},
		{name: "republish of a done job: a new generation", from: Done, why: ResetRepublish, splat: true, to: Queued, newGen: true},
		{name: "resume of a held job publishes its upload again", from: Held, why: ResetResume, splat: true, to: Uploaded,
			kept: []string{"Dev", "Ino", "SHA256", "Kind", "Resigns", "Publishes", "Upload", "Encoded", "Protocol", "V1",
				"SplatID", "SplatHash", "ViewerURL", "TaskStatus", "PublishedAt", "CompletedAt", "DuplicateOf", "Adopted"}},
		{name: "the file changed after its upload", from: Uploaded, why: ResetChanged, to: Queued,
			kept: []string{"Publishes", "DuplicateOf"}},
		{name: "the file changed while queued keeps its attempts", from: Queued, why: ResetChanged, to: Queued,
			kept: []string{"Publishes", "DuplicateOf", "Attempts", "StageSince"}},
		{name: "no republish of a failed job", from: Failed, why: ResetRepublish, refused: true},
		{name: "no retry of a done job", from: Done, why: ResetRetry, refused: true},
		{name: "no change after the publish intent", from: Publishing, why: ResetChanged, refused: true},
		{name: "no resume of a failed job", from: Failed, why: ResetResume, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := fullJob(tc.from)
			if !tc.splat {
				before.SplatID = ""
			}
			j := before
			now := before.UpdatedAt.Add(time.Hour)
			err := j.Reset(tc.why, now)
			if tc.refused {
				if err == nil || !reflect.DeepEqual(j, before) {
					t.Fatalf("Reset(%s) of a %s job: %v, job %+v", tc.why, tc.from, err, j)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantGen := before.Generation
			if tc.newGen {
				wantGen++
			}
			if j.Stage != tc.to || j.Generation != wantGen || !j.UpdatedAt.Equal(now) || !j.NextAttempt.Equal(now) {
				t.Errorf("stage %s generation %d updated %s next %s; want %s, %d, now", j.Stage, j.Generation, j.UpdatedAt, j.NextAttempt, tc.to, wantGen)
			}
			kept := append(slices.Clone(identity), tc.kept...)
			apart := []string{"Stage", "Generation", "UpdatedAt", "NextAttempt"}
			if !slices.Contains(kept, "Attempts") {
				apart = append(apart, "Attempts", "StageSince")
				if j.Attempts != 0 || !j.StageSince.Equal(now) {
					t.Errorf("attempts %d since %s: the stage's bookkeeping is not restarted", j.Attempts, j.StageSince)
				}
			}
			bv, jv := reflect.ValueOf(before), reflect.ValueOf(j)
			for i := range bv.NumField() {
				name := bv.Type().Field(i).Name
				switch {
				case slices.Contains(apart, name):
				case slices.Contains(kept, name):
					if !reflect.DeepEqual(jv.Field(i).Interface(), bv.Field(i).Interface()) {
						t.Errorf("%s not kept: %v, was %v", name, jv.Field(i), bv.Field(i))
					}
				case !jv.Field(i).IsZero():
					t.Errorf("%s not cleared: %v", name, jv.Field(i))
				}
			}
		})
	}
}

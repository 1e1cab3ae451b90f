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
		V: 2, ID: 7, File: File{Path: "/in/a.ply", Root: "/in", Size: 10, ModTime: t0, Dev: 1, Ino: 2, SHA256: "ab", Kind: "ply"},
		Stage: stage, Attempts: 3, NextAttempt: t0, CreatedAt: t0,
		UpdatedAt: t0, StageSince: t0, Publication: Publication{Uncertain: true, Resigns: 1, Publishes: 2, Protocol: ProtocolV1, Generation: 1, DuplicateOf: 9, Adopted: true}, After: After{Finalized: true, AfterAction: "move", AfterError: "ae", AfterAttempts: 1, AfterRetry: t0},
		Upload: Upload{URL: "u", Key: "k"}, Params: PublishParams{Title: "a"},
		Encoding: Encoding{Encoded: &Encoded{Encoding: "sog", Path: "/state/x.sog"}, EncodeSkipped: "why"},
		V1:       &Session{Attempt: 1, Key: "key"}, Splat: Splat{SplatID: "s", SplatHash: "h", ViewerURL: "v", TaskStatus: "done", TaskMessage: "m", PublishedAt: &t0, CompletedAt: &t0},
		Wait:    Wait{Parked: "peer", RateLimited: &RateWait{Class: "strict"}},
		Failure: Failure{LastError: "e", LastStatus: 503, FailReason: "f"},
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
			kept: []string{"Dev", "Ino", "SHA256", "Kind", "Resigns", "Publishes", "Upload", "Encoded", "EncodeSkipped", "Protocol", "V1",
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
			for _, f := range reflect.VisibleFields(bv.Type()) {
				if f.Anonymous {
					continue // a sub-record: its fields are listed on their own
				}
				b, a := bv.FieldByIndex(f.Index), jv.FieldByIndex(f.Index)
				switch {
				case slices.Contains(apart, f.Name):
				case slices.Contains(kept, f.Name):
					if !reflect.DeepEqual(a.Interface(), b.Interface()) {
						t.Errorf("%s not kept: %v, was %v", f.Name, a, b)
					}
				case !a.IsZero():
					t.Errorf("%s not cleared: %v", f.Name, a)
				}
			}
		})
	}
}

package queue

import (
	"encoding/json"
	"testing"

	"github.com/splatd/splatd/state"
)

// topFinalized is finalizedRecord by encoding/json.
func topFinalized(raw []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return false
	}
	return string(top["finalized"]) == "true"
}

// TestFinalizedRecord: only the job's own "finalized": true counts, not a
// settings key of that name nor the text in a path.
func TestFinalizedRecord(t *testing.T) {
	settings := func(m map[string]any) state.PublishParams { return state.PublishParams{Settings: m} }
	jobs := []state.Job{
		{ID: 1, Stage: state.Done},
		{ID: 2, Stage: state.Done},
		{ID: 3, Stage: state.Failed},
		{ID: 4, Stage: state.Done, Params: settings(map[string]any{"finalized": true, "n": map[string]any{"finalized": true}, "l": []any{"]", "}"}})},
		{ID: 5, Stage: state.Held, Params: settings(map[string]any{"finalized": false})},
	}
	jobs[0].Finalized, jobs[4].Finalized = true, true
	jobs[2].Path, jobs[2].LastError = `/w/"finalized":true.ply`, `{"finalized":true}`
	for _, j := range jobs {
		raw, err := j.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got := finalizedRecord(raw); got != j.Finalized {
			t.Errorf("job %d: finalizedRecord = %v, want %v (%s)", j.ID, got, j.Finalized, raw)
		}
	}
	for _, raw := range []string{``, `{`, `{"finalized":tru`, `{"a":"x`, `[{"finalized":true}]`, `{"a":{"finalized":true}}`, ` { "finalized" : true } `} {
		if got, want := finalizedRecord([]byte(raw)), topFinalized([]byte(raw)); got != want {
			t.Errorf("finalizedRecord(%q) = %v, want %v", raw, got, want)
		}
	}
}

func FuzzFinalizedRecord(f *testing.F) {
	for _, s := range []string{`{"finalized":true}`, `{"a":[1,{"finalized":true}],"finalized":true}`, `{"a":"\"finalized\":true"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		if got, want := finalizedRecord(raw), topFinalized(raw); got != want {
			t.Errorf("finalizedRecord(%q) = %v, want %v", raw, got, want)
		}
	})
}

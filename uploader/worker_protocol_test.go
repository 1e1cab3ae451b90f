package uploader

import (
	"io"
	"net/http"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// TestWorkerUnreadablePublishAnswerHolds: a publish answered 2xx without a
// usable id has most likely created a splat. The job is held for an
// operator after that one call, even with on_uncertain: republish, instead
// of publishing again at every backoff step.
func TestWorkerUnreadablePublishAnswerHolds(t *testing.T) {
	t.Parallel()
	srv, publishes, _ := oneshotServer(t,
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"splat":{"id":50}}`) // wrapped: no top-level id
		},
		func(int32, http.ResponseWriter) {})

	e := newWorkerEnv(t, apisim.Options{}) // for its store and files; the client points at srv
	c := oneshotClient(t, srv)
	p := e.writePLY("odd-answer.ply", 40)
	e.enqueue(p)
	o := e.options(1)
	o.Client = c
	o.OnUncertain = UncertainRepublish
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.jobs()[0]
	if j.Stage != state.Held || publishes.Load() != 1 {
		t.Fatalf("job %s after %d publishes (reason %q); want held after exactly 1", j.Stage, publishes.Load(), j.FailReason)
	}
	if _, ok := e.finished.Load(j.ID); !ok {
		t.Error("Finish not called for the held job (no receipt)")
	}
}

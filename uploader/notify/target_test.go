package notify

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splatd/splatd/state"
)

// TestSetTargetWhileDelivering: a reload's new webhook, headers and
// command take the events queued from then on; an event being delivered
// to the old webhook meanwhile finishes there, with the old headers; an
// invalid webhook changes nothing.
func TestSetTargetWhileDelivering(t *testing.T) {
	t.Parallel()
	needShell(t)
	entered, release := make(chan struct{}), make(chan struct{})
	oldRV := &receiver{codes: []int{200}}
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release // held in flight across the reload
		oldRV.ServeHTTP(w, r)
	}))
	defer old.Close()
	newRV := &receiver{codes: []int{200}}
	nw := httptest.NewServer(newRV)
	defer nw.Close()
	dir := t.TempDir()
	log := filepath.Join(dir, "exec.log")
	cmd := func(label string) func(string) Command {
		return func(string) Command {
			return Command{Argv: []string{"sh", "-c", `echo "$1 $SPLATD_EVENT" >> "$2"`, "sh", label, log}}
		}
	}
	n, _, _ := newTest(t, Options{Webhook: old.URL + "/old", Headers: http.Header{"X-Secret": {"old"}}, Exec: cmd("A")})

	n.Finished("/r", receiptOf(state.Done))
	<-entered // the first event is in flight to the old webhook
	if err := n.SetTarget(Target{Webhook: "ftp://nope"}); err == nil {
		t.Error("SetTarget took an ftp:// webhook")
	}
	if err := n.SetTarget(Target{Webhook: nw.URL + "/new", Headers: http.Header{"X-Secret": {"new"}}, Exec: cmd("B")}); err != nil {
		t.Fatal(err)
	}
	n.Finished("/r", receiptOf(state.Failed))
	if err := n.SetTarget(Target{Webhook: nw.URL + "/new"}); err != nil { // after.exec removed
		t.Fatal(err)
	}
	n.Finished("/r", receiptOf(state.Held))
	close(release)
	drain(t, n)

	if got := oldRV.got(); len(got) != 1 || got[0].header.Get("X-Secret") != "old" || !strings.Contains(string(got[0].body), `"event":"done"`) {
		t.Errorf("old webhook got %d requests (%v); want the first event only, with the old header", len(got), got)
	}
	got := newRV.got()
	if len(got) != 2 || !strings.Contains(string(got[0].body), `"event":"failed"`) || got[0].header.Get("X-Secret") != "new" ||
		!strings.Contains(string(got[1].body), `"event":"held"`) || got[1].header.Get("X-Secret") != "" {
		t.Errorf("new webhook got %d requests (%v); want the failed event with the new header and the held one without", len(got), got)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "A done\nB failed\n" {
		t.Errorf("commands ran:\n%s\nwant A for the first event, B for the second, none for the third", b)
	}
}

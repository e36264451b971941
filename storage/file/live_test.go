package file

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func openMsg(id string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
}

func contentAt(t *testing.T, v *view, i int) string {
	t.Helper()
	m := new(sessiondv1.Message)
	if err := proto.Unmarshal(v.at(i), m); err != nil {
		t.Fatal(err)
	}
	return m.GetContent()
}

// TestDeltaSharesMessageList: a delta's new view shares the session's
// message list with the view before it instead of copying it, and the
// earlier view, which a reader may hold, still shows the message as it
// was. Appends after the turn see its final text.
func TestDeltaSharesMessageList(t *testing.T) {
	s := openStore(t, t.TempDir())
	a := mustCreate(t, s, storage.CreateRequest{Messages: append(msgs("m", 3), openMsg("open"))})
	ref := storage.Ref{ID: a.ID}
	e := entryOf(t, s, a.ID)
	before := e.view.Load()
	for i, piece := range []string{"ab", "cd"} {
		if _, err := s.AppendDelta(t.Context(), storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "open", Offset: int64(2 * i), Content: piece}}); err != nil {
			t.Fatal(err)
		}
	}
	after := e.view.Load()
	if &after.msgs[0] != &before.msgs[0] {
		t.Error("a delta copied the session's message list")
	}
	if got := contentAt(t, before, 3); got != "" {
		t.Errorf("the view before the deltas shows %q; want the message as it was", got)
	}
	if got := contentAt(t, after, 3); got != "abcd" {
		t.Errorf("the view after the deltas shows %q, want %q", got, "abcd")
	}
	if got, want := after.size, msgsSize(after.all()); got != want {
		t.Errorf("view size %d, want %d", got, want)
	}
	if _, err := s.FinishMessage(t.Context(), storage.FinishRequest{Ref: ref, MessageID: "open", State: sessiondv1.MessageState_MESSAGE_STATE_COMPLETE}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, a.ID, msg("next", "n"))
	_, ms, err := s.Load(t.Context(), ref, storage.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(ms), []string{"m0", "m1", "m2", "open", "next"}; !slices.Equal(got, want) {
		t.Fatalf("loaded %v, want %v", got, want)
	}
	if ms[3].GetContent() != "abcd" || ms[3].GetState() == sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		t.Errorf("the finished message: %q in state %v", ms[3].GetContent(), ms[3].GetState())
	}
	if got := contentAt(t, before, 3); got != "" {
		t.Errorf("after the append, the first view shows %q", got)
	}
}

// TestDeltaKeepsCompactions: a delta leaves the session's compactions in
// its view, so the context view still starts at the summary, and a retry
// of the compaction is found to have landed.
func TestDeltaKeepsCompactions(t *testing.T) {
	s := openStore(t, t.TempDir())
	a := mustCreate(t, s, storage.CreateRequest{Messages: append(msgs("m", 3), openMsg("open"))})
	ref := storage.Ref{ID: a.ID}
	sum := &sessiondv1.Message{Id: "sum", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "summary"}
	if _, err := s.Compact(t.Context(), storage.CompactRequest{Ref: ref, ThroughMessageID: "m1", Summary: sum}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendDelta(t.Context(), storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "open", Content: "x"}}); err != nil {
		t.Fatal(err)
	}
	_, ms, err := s.Load(t.Context(), ref, storage.LoadOptions{View: storage.ViewContext})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(ms), []string{"sum", "m2", "open"}; !slices.Equal(got, want) {
		t.Errorf("context view after a delta: %v, want %v", got, want)
	}
	again, err := s.Compact(t.Context(), storage.CompactRequest{Ref: ref, ThroughMessageID: "m1", Summary: sum})
	if err != nil {
		t.Fatal(err)
	}
	if again.Revision != a.Revision+2 {
		t.Errorf("the retried compaction left revision %d, want %d (the compaction's and the delta's)", again.Revision, a.Revision+2)
	}
}

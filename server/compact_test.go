package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestCompactSession: over gRPC, a compaction keeps the full view, gives
// the context view, shows in the session's metadata and watch events, and
// is refused with the codes the API names (INVALID_ARGUMENT naming the
// field for a split tool call or an unknown view, ABORTED when stale).
func TestCompactSession(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	// Bounded: a missed watch event fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	created, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: parallelCalls()})
	if err != nil {
		t.Fatal(err)
	}
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: created.GetSession().GetId()}}
	watch, err := h.client.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil { // the subscription is live
		t.Fatal(err)
	}
	summary := &sessiondv1.Message{Id: "sum", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "Paris is at 18°C."}

	// a1's call to Oslo has no result: no range holding a1 is whole.
	_, err = h.client.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: ref, ThroughMessageId: "u2", Summary: summary})
	wantCode(t, err, codes.InvalidArgument, "through_message_id")
	_, err = h.client.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: ref, ThroughMessageId: "u1", Summary: summary, ExpectedRevision: 7})
	wantCode(t, err, codes.Aborted, "")
	_, err = h.client.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: ref, ThroughMessageId: "u1"})
	wantCode(t, err, codes.InvalidArgument, "summary")

	resp, err := h.client.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: ref, ThroughMessageId: "u1", Summary: summary, ExpectedRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	se := resp.GetSession()
	if c := se.GetCompaction(); se.GetRevision() != 2 || se.GetContextMessageCount() != 5 || c.GetThroughMessageCount() != 1 ||
		c.GetThroughMessageId() != "u1" || c.GetSummaryMessageId() != "sum" || c.GetRevision() != 2 || c.GetCreatedAt() == nil {
		t.Errorf("CompactSession answered %v", se)
	}
	ev, err := watch.Recv()
	if err != nil || ev.GetType() != sessiondv1.EventType_EVENT_TYPE_COMPACTED || ev.GetSession().GetCompaction().GetThroughMessageId() != "u1" {
		t.Errorf("watch event %v, %v; want EVENT_TYPE_COMPACTED with the compaction", ev, err)
	}

	_, full := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref})
	if want := []string{"u1", "a1", "t1", "u2", "a2"}; !slices.Equal(ids(full), want) {
		t.Errorf("full view %v, want %v", ids(full), want)
	}
	got, view := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref, View: sessiondv1.LoadView_LOAD_VIEW_CONTEXT, CloseOpenToolCalls: true})
	if want := []string{"sum", "a1", "t1", "sessiond-interrupted-call_oslo", "u2", "a2"}; !slices.Equal(ids(view), want) || view[3].GetToolCallId() != "call_oslo" {
		t.Errorf("context view closing open calls %v, want %v with a synthetic result for call_oslo", ids(view), want)
	}
	if got.GetContextMessageCount() != 5 || got.GetCompaction().GetThroughMessageCount() != 1 {
		t.Errorf("loaded session %v", got)
	}
	_, tail := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref, View: sessiondv1.LoadView_LOAD_VIEW_CONTEXT, Tail: true, Limit: 2})
	if want := []string{"u2", "a2"}; !slices.Equal(ids(tail), want) {
		t.Errorf("context view tail 2: %v, want %v", ids(tail), want)
	}
	st, err := h.client.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: ref, View: 9})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "view")
}

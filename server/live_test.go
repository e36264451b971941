package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestLiveTurn streams an answer through the RPCs: each delta is a watch
// event with its offset, refusals carry the codes and words the proto
// promises, and the finish closes the message for every reader.
func TestLiveTurn(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	// Bounded: a missed watch event fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess := h.create(t, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{user("q", "hi")}})
	ref := byID(sess.GetId())
	w, err := h.client.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: ref})
	if err != nil {
		t.Fatalf("WatchSession: %v", err)
	}
	if _, err := w.Header(); err != nil { // the subscription is live
		t.Fatal(err)
	}
	open := &sessiondv1.Message{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{open}}); err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	var off int64
	for _, part := range []string{"Hel", "lo", " there"} {
		res, err := h.client.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "a", Offset: off, Content: part})
		if err != nil {
			t.Fatalf("AppendDelta(%q): %v", part, err)
		}
		off += int64(len(part))
		if res.GetLength() != off {
			t.Errorf("AppendDelta(%q): length %d, want %d", part, res.GetLength(), off)
		}
	}
	_, err = h.client.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "a", Offset: 99, Content: "x"})
	wantCode(t, err, codes.FailedPrecondition, "message's 11 bytes")
	_, err = h.client.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "q", Content: "x"})
	wantCode(t, err, codes.FailedPrecondition, `message "q"`)
	_, err = h.client.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "a", Offset: -1, Content: "x"})
	wantCode(t, err, codes.InvalidArgument, "offset")
	_, err = h.client.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, Offset: 0, Content: "x"})
	wantCode(t, err, codes.InvalidArgument, "message_id")
	_, err = h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{user("u", "wait")}})
	wantCode(t, err, codes.FailedPrecondition, `message "a" is open`)

	_, msgs := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref})
	if got := msgs[1].GetContent(); got != "Hello there" || msgs[1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		t.Errorf("load mid-stream: %q in state %v", got, msgs[1].GetState())
	}
	fin, err := h.client.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "a", Model: "m",
		ToolCalls: []*sessiondv1.ToolCall{{Id: "c", Name: "n", Arguments: "{}"}}})
	if err != nil {
		t.Fatalf("FinishMessage: %v", err)
	}
	if fin.GetMessage().GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE || fin.GetMessage().GetContent() != "Hello there" {
		t.Errorf("finished message: %v", fin.GetMessage())
	}
	_, err = h.client.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "a", ToolCalls: []*sessiondv1.ToolCall{{Id: "", Name: "n"}}})
	wantCode(t, err, codes.InvalidArgument, "tool_calls[0].id")

	want := []struct {
		typ     sessiondv1.EventType
		off     int64
		content string
	}{
		{sessiondv1.EventType_EVENT_TYPE_APPENDED, 0, ""},
		{sessiondv1.EventType_EVENT_TYPE_DELTA, 0, "Hel"},
		{sessiondv1.EventType_EVENT_TYPE_DELTA, 3, "lo"},
		{sessiondv1.EventType_EVENT_TYPE_DELTA, 5, " there"},
		{sessiondv1.EventType_EVENT_TYPE_FINISHED, 0, ""},
	}
	rev := sess.GetRevision()
	for i, wv := range want {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch event %d: %v", i, err)
		}
		rev++
		if ev.GetType() != wv.typ || ev.GetRevision() != rev || ev.GetDelta().GetOffset() != wv.off || ev.GetDelta().GetContent() != wv.content {
			t.Errorf("watch event %d: %v at %d %v, want %v at %d offset %d %q", i, ev.GetType(), ev.GetRevision(), ev.GetDelta(), wv.typ, rev, wv.off, wv.content)
		}
		if wv.typ == sessiondv1.EventType_EVENT_TYPE_FINISHED && ev.GetMessages()[0].GetModel() != "m" {
			t.Errorf("finished event carries %v", ev.GetMessages())
		}
	}
}

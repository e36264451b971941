package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// openMsg returns an open assistant message.
func openMsg(id, content string, calls ...*sessiondv1.ToolCall) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_ASSISTANT, Content: content,
		State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING, ToolCalls: calls}
}

func delta(id string, off int64, content string) storage.DeltaRequest {
	return storage.DeltaRequest{Delta: &sessiondv1.MessageDelta{MessageId: id, Offset: off, Content: content}}
}

// appendDelta sends a delta to ref or fails the test.
func appendDelta(t *testing.T, s *storage.Store, ref storage.Ref, req storage.DeltaRequest) storage.DeltaResult {
	t.Helper()
	req.Ref = ref
	res, err := s.AppendDelta(t.Context(), req)
	if err != nil {
		t.Fatalf("AppendDelta(%v): %v", req.Delta, err)
	}
	return res
}

// liveStore returns a store on fresh data, or skips the test when the
// backend does not store live turns.
func liveStore(t *testing.T, h *harness) *storage.Store {
	t.Helper()
	s := h.open(t)
	se := create(t, s, storage.CreateRequest{})
	_, err := s.AppendDelta(t.Context(), storage.DeltaRequest{Ref: storage.Ref{ID: se.ID}, Delta: &sessiondv1.MessageDelta{MessageId: "x", Content: "x"}})
	if errors.Is(err, storage.ErrUnsupported) {
		t.Skip("the backend does not store live turns")
	}
	wantErr(t, "AppendDelta to a session without an open message", err, storage.ErrMessageState)
	return s
}

// testLive checks live turns: an open message grows by deltas, idempotent
// by offset, each a revision and a watch event; it closes by a finish or
// an interrupt, and survives a reopen.
func testLive(t *testing.T, h *harness) {
	t.Run("Deltas", func(t *testing.T) {
		t.Parallel()
		s := liveStore(t, h)
		ctx := t.Context()
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{msg("q", "why?")}})
		res := appendMsgs(t, s, ref, openMsg("a", "Be"))
		if got := get(t, s, ref); got.OpenMessageID != "a" {
			t.Errorf("after opening a: OpenMessageID %q, want a", got.OpenMessageID)
		}
		rev := res.Revision
		for _, d := range []struct {
			off  int64
			text string
			want int64 // length after
			bump bool
		}{
			{2, "cause", 7, true},
			{2, "cause", 7, false},     // a retry
			{4, "use", 7, false},       // a retry of part of it
			{5, "se of", 10, true},     // overlaps the end: only " of" is new
			{10, " the sky", 18, true}, // plain
		} {
			got := appendDelta(t, s, ref, delta("a", d.off, d.text))
			if d.bump {
				rev++
			}
			if got.Revision != rev || got.Length != d.want {
				t.Errorf("delta %q at %d: got revision %d length %d, want %d and %d", d.text, d.off, got.Revision, got.Length, rev, d.want)
			}
		}
		_, ms := loadAll(t, s, ref)
		if got := ms[1].GetContent(); got != "Because of the sky" {
			t.Errorf("open message holds %q, want %q", got, "Because of the sky")
		}
		if ms[1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
			t.Errorf("open message state %v, want STREAMING", ms[1].GetState())
		}
		if hits := searchAll(t, s, storage.SearchOptions{Namespace: nsA, Query: "of the sky"}); len(hits) != 1 || hits[0].MessageIndex != 1 {
			t.Errorf("search for open text: %+v, want one hit in message 1", hits)
		}
		before := takeSnapshot(t, s, ref)
		for _, bad := range []struct {
			what string
			req  storage.DeltaRequest
			want error
		}{
			{"offset past the end", delta("a", 19, "x"), storage.ErrMessageState},
			{"other bytes at the offset", delta("a", 0, "Cause"), storage.ErrMessageState},
			{"a message that is not open", delta("q", 4, "!"), storage.ErrMessageState},
			{"a message not in the session", delta("nope", 0, "x"), storage.ErrMessageState},
			{"an empty delta", delta("a", 18, ""), storage.ErrInvalid},
			{"a negative offset", delta("a", -1, "x"), storage.ErrInvalid},
			{"reasoning past its end", storage.DeltaRequest{Delta: &sessiondv1.MessageDelta{MessageId: "a", ReasoningOffset: 3, Reasoning: "x"}}, storage.ErrMessageState},
		} {
			bad.req.Ref = ref
			_, err := s.AppendDelta(ctx, bad.req)
			wantErr(t, "AppendDelta of "+bad.what, err, bad.want)
		}
		_, err := s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "a", Offset: 19, Content: "x"}})
		if err == nil || !strings.Contains(err.Error(), "18") {
			t.Errorf("offset past the end: error %v does not give the current length 18", err)
		}
		_, err = s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("u", "more")}})
		wantErr(t, "Append while a message is open", err, storage.ErrMessageState)
		checkUnchanged(t, "refused writes", s, ref, before)

		// Reasoning and usage go in as they arrive.
		got := appendDelta(t, s, ref, storage.DeltaRequest{Delta: &sessiondv1.MessageDelta{MessageId: "a", Reasoning: "hmm",
			Usage: &sessiondv1.Usage{OutputTokens: 4}}})
		if got.ReasoningLength != 3 || got.Length != 18 {
			t.Errorf("reasoning delta: lengths %d/%d, want 18/3", got.Length, got.ReasoningLength)
		}
		if se := get(t, s, ref); se.Usage.OutputTokens != 0 {
			t.Errorf("an open message's usage counts in the session already: %+v", se.Usage)
		}

		// Finish with final fields; a retry is a no-op.
		fin := storage.FinishRequest{Ref: ref, MessageID: "a", Model: "m1", Usage: &sessiondv1.Usage{OutputTokens: 9},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Name: "look"}}}
		done, err := s.FinishMessage(ctx, fin)
		must(t, "FinishMessage", err)
		want := proto.Clone(ms[1]).(*sessiondv1.Message)
		want.State, want.Model, want.Usage, want.ToolCalls = sessiondv1.MessageState_MESSAGE_STATE_COMPLETE, "m1", fin.Usage, fin.ToolCalls
		want.Reasoning = &sessiondv1.Reasoning{Text: "hmm"}
		if d := cmp.Diff(want, done.Message, protocmp.Transform()); d != "" {
			t.Errorf("finished message (-want +got):\n%s", d)
		}
		after := get(t, s, ref)
		if after.Revision != done.Revision || after.OpenMessageID != "" || after.Usage.OutputTokens != 9 ||
			len(after.OpenToolCallIDs) != 1 || after.OpenToolCallIDs[0] != "c1" || len(after.Models) != 1 {
			t.Errorf("after finish: %+v", after)
		}
		again, err := s.FinishMessage(ctx, fin)
		must(t, "FinishMessage again", err)
		if again.Revision != done.Revision || again.Closed {
			t.Errorf("retried finish: revision %d closed %v, want %d, false", again.Revision, again.Closed, done.Revision)
		}
		fin.Model = "m2"
		_, err = s.FinishMessage(ctx, fin)
		wantErr(t, "FinishMessage with other fields after it landed", err, storage.ErrMessageState)
		_, err = s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "a", Offset: 18, Content: "!"}})
		wantErr(t, "AppendDelta after finish", err, storage.ErrMessageState)
		appendMsgs(t, s, ref, &sessiondv1.Message{Id: "r", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1", Content: "blue"})
	})

	t.Run("Rules", func(t *testing.T) {
		t.Parallel()
		s := liveStore(t, h)
		ctx := t.Context()
		_, ref := createRef(t, s, storage.CreateRequest{})
		for _, bad := range []struct {
			what string
			ms   []*sessiondv1.Message
		}{
			{"an open message before another", []*sessiondv1.Message{openMsg("o1", ""), msg("m", "x")}},
			{"an open user message", []*sessiondv1.Message{{Id: "o2", Role: sessiondv1.Role_ROLE_USER, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}},
			{"an unknown state", []*sessiondv1.Message{{Id: "o3", Role: sessiondv1.Role_ROLE_ASSISTANT, State: 9}}},
		} {
			_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: bad.ms})
			wantErr(t, "Append of "+bad.what, err, storage.ErrInvalid)
		}
		// A message imported as complete or interrupted is not open.
		done := &sessiondv1.Message{Id: "d", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "x", State: sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED}
		appendMsgs(t, s, ref, done)
		_, err := s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "d", Offset: 1, Content: "y"}})
		wantErr(t, "AppendDelta to an interrupted message", err, storage.ErrMessageState)
		_, err = s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "d"})
		wantErr(t, "FinishMessage of an interrupted message", err, storage.ErrMessageState)
		// A retried opening append is a no-op while the message is untouched.
		appendMsgs(t, s, ref, openMsg("o", "a"))
		if res := appendMsgs(t, s, ref, openMsg("o", "a")); res.Appended != 0 {
			t.Errorf("retried opening append stored %d messages", res.Appended)
		}
		// A summary cannot stand for a message still being written; a
		// range before it can be compacted, and the open message stays
		// after the range.
		_, err = s.Compact(ctx, storage.CompactRequest{Ref: ref, ThroughMessageID: "o", Summary: summaryMsg("sum-o", "x")})
		wantErr(t, "Compact through the open message", err, storage.ErrMessageState)
		if got := compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "d", Summary: summaryMsg("sum-d", "x")}); got.OpenMessageID != "o" || got.ContextMessageCount() != 2 {
			t.Errorf("Compact through the message before the open one: open %q, context count %d; want o and 2", got.OpenMessageID, got.ContextMessageCount())
		}
		if _, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "o"}); err != nil {
			t.Fatalf("FinishMessage(o): %v", err)
		}
		compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "o", Summary: summaryMsg("sum-o", "x")})
	})

	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		s := liveStore(t, h)
		_, ref := createRef(t, s, storage.CreateRequest{})
		early := watch(t, s, ref, 0)
		res := appendMsgs(t, s, ref, openMsg("a", ""))
		checkEvent(t, s, nextEvent(t, early), storage.EventAppended, res.Revision)
		words := []string{"one ", "two ", "three ", "four ", "five"}
		var text string
		var mid uint64
		for i, w := range words {
			r := appendDelta(t, s, ref, delta("a", int64(len(text)), w))
			text += w
			if i == 1 {
				mid = r.Revision
			}
		}
		appendDelta(t, s, ref, delta("a", 0, "one ")) // a retry: no event
		// Early watcher: every delta once, in order, one revision each.
		var got string
		for i := range words {
			ev := nextEvent(t, early)
			checkEvent(t, s, ev, storage.EventDelta, res.Revision+1+uint64(i))
			if ev.Delta.GetMessageId() != "a" || ev.Delta.GetOffset() != int64(len(got)) {
				t.Fatalf("delta event %d: %v, want message a at offset %d", i, ev.Delta, len(got))
			}
			got += ev.Delta.GetContent()
		}
		if got != text {
			t.Errorf("early watcher built %q, want %q", got, text)
		}
		// A watcher joining mid-stream: load at a revision, watch from it.
		sub := watch(t, s, ref, mid)
		rebuilt := strings.Join(words[:2], "")
		for range words[2:] {
			ev := nextEvent(t, sub)
			if ev.Type != storage.EventDelta || ev.Delta.GetOffset() != int64(len(rebuilt)) {
				t.Fatalf("late watcher: event %v %v at offset %d, want a delta at %d", ev.Type, ev.Delta, ev.Delta.GetOffset(), len(rebuilt))
			}
			rebuilt += ev.Delta.GetContent()
		}
		if rebuilt != text {
			t.Errorf("late watcher built %q, want %q", rebuilt, text)
		}
		checkQuiet(t, "late watcher after the deltas", sub)
		fin, err := s.FinishMessage(t.Context(), storage.FinishRequest{Ref: ref, MessageID: "a"})
		must(t, "FinishMessage", err)
		for _, w := range []*storage.Subscription{early, sub} {
			ev := nextEvent(t, w)
			checkEvent(t, s, ev, storage.EventFinished, fin.Revision)
			if len(ev.Messages) != 1 || ev.Messages[0].GetContent() != text || ev.Messages[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE {
				t.Errorf("finished event carries %v", ev.Messages)
			}
		}
	})

	t.Run("Interrupt", func(t *testing.T) {
		t.Parallel()
		s := liveStore(t, h)
		ctx := t.Context()
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsB})
		appendMsgs(t, s, ref, openMsg("a", "half", &sessiondv1.ToolCall{Id: "c", Name: "t"}))
		appendDelta(t, s, ref, delta("a", 4, " an answer"))
		n, err := s.InterruptIdle(ctx, time.Now().Add(-time.Hour))
		must(t, "InterruptIdle of nothing idle", err)
		if n != 0 || get(t, s, ref).OpenMessageID != "a" {
			t.Fatalf("InterruptIdle closed %d messages of sessions active now", n)
		}
		sub := watch(t, s, ref, 0)
		pause()
		n, err = s.InterruptIdle(ctx, time.Now())
		must(t, "InterruptIdle", err)
		if n < 1 {
			t.Fatalf("InterruptIdle closed %d messages, want the idle one", n)
		}
		ev := nextEvent(t, sub)
		if ev.Type != storage.EventFinished || ev.Messages[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED {
			t.Errorf("interrupt event: %v %v", ev.Type, ev.Messages)
		}
		got, ms, err := s.Load(ctx, ref, storage.LoadOptions{CloseOpenToolCalls: true})
		must(t, "Load", err)
		if got.OpenMessageID != "" || len(got.OpenToolCallIDs) != 1 {
			t.Errorf("after interrupt: open message %q, open calls %v", got.OpenMessageID, got.OpenToolCallIDs)
		}
		if len(ms) != 2 || ms[0].GetContent() != "half an answer" || ms[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED ||
			ms[1].GetToolCallId() != "c" || ms[1].GetMetadata()[storage.SyntheticKey] != "true" {
			t.Errorf("load after interrupt: %v", ms)
		}
		_, err = s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "a", Offset: 14, Content: "!"}})
		wantErr(t, "AppendDelta after interrupt", err, storage.ErrMessageState)
		appendMsgs(t, s, ref, msg("next", "go on"))
	})

	t.Run("WriterInterrupts", func(t *testing.T) {
		t.Parallel()
		s := liveStore(t, h)
		ctx := t.Context()
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsB})
		appendMsgs(t, s, ref, openMsg("a", "cut"))
		_, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "a", State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING})
		wantErr(t, "FinishMessage to STREAMING", err, storage.ErrInvalid)
		// Written to just now, yet closed at once: the writer says it stopped.
		res, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "a", State: sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED, Model: "m"})
		must(t, "FinishMessage INTERRUPTED", err)
		if m := res.Message; !res.Closed || m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED || m.GetContent() != "cut" || m.GetModel() != "m" {
			t.Errorf("interrupted by its writer: closed %v, message %v", res.Closed, m)
		}
		if got := get(t, s, ref); got.OpenMessageID != "" || got.Revision != res.Revision {
			t.Errorf("after the writer's interrupt: open message %q, revision %d; want none and %d", got.OpenMessageID, got.Revision, res.Revision)
		}
		again, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "a", State: sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED})
		must(t, "retried FinishMessage INTERRUPTED", err)
		if again.Closed || again.Revision != res.Revision || again.Message.GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED {
			t.Errorf("retried interrupt: closed %v at revision %d, state %v; want a no-op at %d", again.Closed, again.Revision, again.Message.GetState(), res.Revision)
		}
		appendMsgs(t, s, ref, msg("next", "go on"))
	})

	t.Run("Reopen", func(t *testing.T) {
		t.Parallel()
		s1, addr := h.openData(t)
		_, ref := createRef(t, s1, storage.CreateRequest{})
		_, err := s1.AppendDelta(t.Context(), storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "a", Content: "x"}})
		if errors.Is(err, storage.ErrUnsupported) {
			t.Skip("the backend does not store live turns")
		}
		appendMsgs(t, s1, ref, openMsg("a", ""))
		appendDelta(t, s1, ref, delta("a", 0, "x"))
		appendDelta(t, s1, ref, delta("a", 1, "yz"))
		_, refB := createRef(t, s1, storage.CreateRequest{})
		appendMsgs(t, s1, refB, openMsg("b", "1"))
		appendDelta(t, s1, refB, delta("b", 1, "2"))
		_, err = s1.FinishMessage(t.Context(), storage.FinishRequest{Ref: refB, MessageID: "b", Model: "m"})
		must(t, "FinishMessage", err)
		s2 := h.reopen(t, "after reopen", s1, addr)
		if got := get(t, s2, ref); got.OpenMessageID != "a" {
			t.Errorf("after reopen: open message %q, want a", got.OpenMessageID)
		}
		appendDelta(t, s2, ref, delta("a", 3, "!"))
		_, ms := loadAll(t, s2, ref)
		if ms[0].GetContent() != "xyz!" {
			t.Errorf("after reopen and a delta: %q", ms[0].GetContent())
		}
		checkInvariants(t, s2)
	})
}

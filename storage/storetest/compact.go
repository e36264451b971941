package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// summaryMsg returns a system message standing for a compacted range.
func summaryMsg(id, text string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_SYSTEM, Content: text}
}

// loadView returns a session and its messages in view with opts, or fails
// the test.
func loadView(t *testing.T, s *storage.Store, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message) {
	t.Helper()
	se, ms, err := s.Load(t.Context(), ref, opts)
	if err != nil {
		t.Fatalf("Load(%+v, %+v): %v", ref, opts, err)
	}
	return se, ms
}

func compact(t *testing.T, s *storage.Store, req storage.CompactRequest) *storage.Session {
	t.Helper()
	se, err := s.Compact(t.Context(), req)
	if err != nil {
		t.Fatalf("Compact(through %q): %v", req.ThroughMessageID, err)
	}
	return se
}

func testCompact(t *testing.T, h *harness) {
	t.Run("Views", func(t *testing.T) {
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{Messages: msgs("m", 6)})
		_, all := loadAll(t, s, ref)
		if se.Compaction != nil || se.ContextMessageCount() != 6 {
			t.Errorf("new session: compaction %+v, context count %d; want none and 6", se.Compaction, se.ContextMessageCount())
		}
		pause()
		sum := summaryMsg("sum-1", "the first three messages")
		got := compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-2", Summary: sum, ExpectedRevision: 1})
		if got.Revision != 2 || got.MessageCount != 6 || !got.UpdatedAt.After(se.UpdatedAt) {
			t.Errorf("Compact answered revision %d, count %d, updated %v; want 2, 6 and later than %v", got.Revision, got.MessageCount, got.UpdatedAt, se.UpdatedAt)
		}
		c := got.Compaction
		if c == nil || c.ThroughCount != 3 || c.ThroughID != "m-2" || c.Revision != 2 || c.SummaryID != "sum-1" {
			t.Fatalf("Compact answered compaction %+v; want through 3 (m-2) at revision 2, summary sum-1", c)
		}
		checkTimeBetween(t, "compaction created_at", c.CreatedAt, se.UpdatedAt, got.UpdatedAt)
		if n := got.ContextMessageCount(); n != 4 {
			t.Errorf("context message count = %d, want 4", n)
		}
		if d := diffSession(got, get(t, s, ref)); d != "" {
			t.Errorf("Compact and Get differ (-compact +get):\n%s", d)
		}
		// The full view is unchanged; the context view is the summary, then the rest.
		full, ms := loadAll(t, s, ref)
		if d := cmpMsgs(all, ms); d != "" {
			t.Errorf("full view after Compact (-want +got):\n%s", d)
		}
		if d := diffSession(got, full); d != "" {
			t.Errorf("Compact and Load differ (-compact +load):\n%s", d)
		}
		_, loadedSum := loadView(t, s, ref, storage.LoadOptions{View: storage.ViewContext, Limit: 1})
		if len(loadedSum) != 1 {
			t.Fatalf("context view with limit 1 has %d messages", len(loadedSum))
		}
		checkMessages(t, "context view's summary", loadedSum, []*sessiondv1.Message{sum})
		ctxView := append([]*sessiondv1.Message{loadedSum[0]}, all[3:]...)
		for _, o := range []storage.LoadOptions{
			{}, {Offset: 1}, {Offset: 2, Limit: 1}, {Limit: 2}, {Tail: true, Limit: 2}, {Tail: true, Limit: 4},
			{Tail: true, Limit: 9}, {Offset: 4}, {Offset: 9}, {Limit: 9},
		} {
			o.View = storage.ViewContext
			_, ms := loadView(t, s, ref, o)
			from, to := o.Window(int64(len(ctxView)))
			if d := cmpMsgs(ctxView[from:to], ms); d != "" {
				t.Errorf("context view with %+v (-want +got):\n%s", o, d)
			}
		}
		// Search, usage and the full view keep the originals.
		if hits := searchAll(t, s, storage.SearchOptions{Query: "content of m-1"}); len(hits) != 1 || hits[0].MessageIndex != 1 {
			t.Errorf("search of a compacted message: %+v, want one hit at index 1", hits)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		s := h.open(t)
		call := &sessiondv1.Message{Id: "call", Role: sessiondv1.Role_ROLE_ASSISTANT,
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Name: "f", Arguments: "{}"}}}
		result := &sessiondv1.Message{Id: "result", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1", Content: "ok"}
		open := &sessiondv1.Message{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT,
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c2", Name: "f", Arguments: "{}"}}}
		_, ref := createRef(t, s, storage.CreateRequest{Messages: []*sessiondv1.Message{msg("u", "hi"), call, result, msg("u2", "more"), open}})
		before := takeSnapshot(t, s, ref)
		sum := summaryMsg("", "summary")
		for _, c := range []struct {
			what  string
			req   storage.CompactRequest
			field string
		}{
			{"a range ending between a call and its result", storage.CompactRequest{ThroughMessageID: "call", Summary: sum}, "through_message_id"},
			{"a range holding an unanswered call", storage.CompactRequest{ThroughMessageID: "open", Summary: sum}, "through_message_id"},
			{"an unknown through id", storage.CompactRequest{ThroughMessageID: "nope", Summary: sum}, "through_message_id"},
			{"no through id", storage.CompactRequest{Summary: sum}, "through_message_id"},
			{"no summary", storage.CompactRequest{ThroughMessageID: "u"}, "summary"},
			{"a summary without a role", storage.CompactRequest{ThroughMessageID: "u", Summary: &sessiondv1.Message{Content: "x"}}, "summary.role"},
			{"a summary making tool calls", storage.CompactRequest{ThroughMessageID: "u", Summary: call}, "summary.tool_calls"},
			{"a summary answering a tool call", storage.CompactRequest{ThroughMessageID: "u", Summary: result}, "summary.tool_call_id"},
		} {
			c.req.Ref = ref
			_, err := s.Compact(t.Context(), c.req)
			wantField(t, "Compact of "+c.what, err, c.field)
		}
		_, err := s.Compact(t.Context(), storage.CompactRequest{Ref: ref, ThroughMessageID: "u", Summary: sum, ExpectedRevision: 2})
		wantErr(t, "Compact with a stale expected revision", err, storage.ErrConflict)
		_, err = s.Compact(t.Context(), storage.CompactRequest{Ref: storage.Ref{Alias: "missing"}, ThroughMessageID: "u", Summary: sum})
		wantErr(t, "Compact of a missing session", err, storage.ErrNotFound)
		checkUnchanged(t, "refused compactions", s, ref, before)
		// After the result, the range is whole.
		got := compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "result", Summary: sum, ExpectedRevision: 1})
		if got.Compaction.ThroughCount != 3 {
			t.Errorf("Compact through the result covers %d messages, want 3", got.Compaction.ThroughCount)
		}
		// close_open_tool_calls works in the context view.
		_, ms := loadView(t, s, ref, storage.LoadOptions{View: storage.ViewContext, CloseOpenToolCalls: true})
		if len(ms) != 4 || ms[0].GetContent() != "summary" || ms[2].GetId() != "open" || ms[3].GetToolCallId() != "c2" {
			t.Errorf("context view closing open calls: %v, want the summary, u2, open and a synthetic result for c2", ids(ms))
		}
	})

	t.Run("Later", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{Messages: msgs("m", 8)})
		_, all := loadAll(t, s, ref)
		compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-2", Summary: summaryMsg("s1", "one")})
		got := compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-5", Summary: summaryMsg("s2", "two")})
		if got.Revision != 3 || got.Compaction.ThroughCount != 6 || got.ContextMessageCount() != 3 {
			t.Errorf("second compaction: revision %d, %+v, context count %d; want 3, through 6, 3", got.Revision, got.Compaction, got.ContextMessageCount())
		}
		_, ms := loadView(t, s, ref, storage.LoadOptions{View: storage.ViewContext})
		if want := []string{"s2", "m-6", "m-7"}; fmt.Sprint(ids(ms)) != fmt.Sprint(want) {
			t.Errorf("context view after a later compaction: %v, want %v", ids(ms), want)
		}
		// A retry of the latest compaction is a no-op, even with a stale revision.
		again, err := s.Compact(t.Context(), storage.CompactRequest{Ref: ref, ThroughMessageID: "m-5", Summary: summaryMsg("s2", "two"), ExpectedRevision: 2})
		if err != nil || again.Revision != 3 {
			t.Errorf("retried compaction: %+v, %v; want a no-op at revision 3", again, err)
		}
		// A later compaction over a shorter range is the latest all the same.
		got = compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-0", Summary: summaryMsg("s3", "three")})
		if got.Compaction.ThroughCount != 1 || got.ContextMessageCount() != 8 {
			t.Errorf("shorter compaction: %+v, context count %d; want through 1, 8", got.Compaction, got.ContextMessageCount())
		}
		// A fork keeps the compactions within what it copies; a rewind
		// drops those reaching past what it keeps.
		fork, err := s.Fork(t.Context(), storage.ForkRequest{Ref: ref, MessageCount: 4})
		must(t, "Fork", err)
		if fork.Compaction == nil || fork.Compaction.SummaryID != "s3" {
			t.Errorf("fork of 4 messages has compaction %+v, want s3's", fork.Compaction)
		}
		rw, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 5})
		must(t, "Rewind", err)
		if rw.Compaction == nil || rw.Compaction.SummaryID != "s3" {
			t.Errorf("rewind to 5 has compaction %+v, want s3's", rw.Compaction)
		}
		_, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 0})
		must(t, "Rewind to 0", err)
		if rw := get(t, s, ref); rw.Compaction != nil || rw.ContextMessageCount() != 0 {
			t.Errorf("rewind to 0 kept compaction %+v", rw.Compaction)
		}
		// Save replaces the messages, and with them every compaction.
		appendMsgs(t, s, ref, all...)
		compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-2", Summary: summaryMsg("s4", "four")})
		saved, err := s.Save(t.Context(), storage.SaveRequest{Ref: ref, Messages: all[:7]})
		must(t, "Save", err)
		if saved.Compaction != nil {
			t.Errorf("Save kept compaction %+v", saved.Compaction)
		}
	})

	t.Run("Watch", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
		sub, err := s.Watch(t.Context(), ref, 0)
		must(t, "Watch", err)
		defer sub.Close()
		got := compact(t, s, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-0", Summary: summaryMsg("s", "x")})
		ev := nextEvent(t, sub)
		if ev.Type != storage.EventCompacted || ev.Revision != 2 || ev.Session.Compaction == nil || *ev.Session.Compaction != *got.Compaction {
			t.Errorf("event %v at %d with %+v; want EventCompacted at 2 with %+v", ev.Type, ev.Revision, ev.Session.Compaction, got.Compaction)
		}
	})

	t.Run("Reopen", func(t *testing.T) {
		s1, addr := h.openData(t)
		_, ref := createRef(t, s1, storage.CreateRequest{Messages: msgs("m", 4)})
		compact(t, s1, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-1", Summary: summaryMsg("s1", "one")})
		compact(t, s1, storage.CompactRequest{Ref: ref, ThroughMessageID: "m-2", Summary: summaryMsg("s2", "two")})
		appendMsgs(t, s1, ref, msg("after", "x"))
		wantSe, wantMs := loadView(t, s1, ref, storage.LoadOptions{View: storage.ViewContext})
		s2 := h.reopen(t, "after reopen", s1, addr)
		gotSe, gotMs := loadView(t, s2, ref, storage.LoadOptions{View: storage.ViewContext})
		if d := diffSession(wantSe, gotSe); d != "" {
			t.Errorf("session after reopen (-before +after):\n%s", d)
		}
		if d := cmpMsgs(wantMs, gotMs); d != "" {
			t.Errorf("context view after reopen (-before +after):\n%s", d)
		}
		// The earlier compaction survived too: a rewind past the later one uses it.
		rw, err := s2.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 2})
		must(t, "Rewind", err)
		if rw.Compaction == nil || rw.Compaction.SummaryID != "s1" {
			t.Errorf("rewind after reopen has compaction %+v, want s1's", rw.Compaction)
		}
		must(t, "Close", s2.Close())
	})

	t.Run("Property", func(t *testing.T) { testCompactProperty(t, h) })
}

// compactModel is what the property test expects of one session: the
// messages appended, and the compactions in force (their ranges and
// summaries), oldest first.
type compactModel struct {
	msgs []*sessiondv1.Message
	cs   []modelCompaction
}

type modelCompaction struct {
	through int64
	summary *sessiondv1.Message
}

func (m compactModel) contextView() []*sessiondv1.Message {
	if len(m.cs) == 0 {
		return m.msgs
	}
	l := m.cs[len(m.cs)-1]
	return append([]*sessiondv1.Message{l.summary}, m.msgs[l.through:]...)
}

func (m compactModel) keep(n int64) compactModel {
	out := compactModel{msgs: m.msgs[:n:n]}
	for _, c := range m.cs {
		if c.through <= n {
			out.cs = append(out.cs, c)
		}
	}
	return out
}

// testCompactProperty applies random appends, compactions, forks and
// rewinds, and checks after each that the full view equals the messages
// appended and the context view equals the latest compaction's summary
// followed by what comes after its range, in windows too.
func testCompactProperty(t *testing.T, h *harness) {
	s := h.open(t)
	rng := rand.New(rand.NewPCG(30, 1))
	type live struct {
		ref   storage.Ref
		model compactModel
	}
	se := create(t, s, storage.CreateRequest{})
	sessions := []*live{{ref: storage.Ref{ID: se.ID}}}
	next := 0
	for step := range 120 {
		l := sessions[rng.IntN(len(sessions))]
		n := int64(len(l.model.msgs))
		switch op := rng.IntN(10); {
		case op < 4 || n == 0:
			batch := make([]*sessiondv1.Message, 1+rng.IntN(3))
			for i := range batch {
				batch[i] = msg(fmt.Sprintf("p-%d", next), fmt.Sprintf("message %d", next))
				next++
			}
			appendMsgs(t, s, l.ref, batch...)
			_, ms := loadView(t, s, l.ref, storage.LoadOptions{Offset: n})
			l.model.msgs = append(l.model.msgs[:n:n], ms...)
		case op < 7:
			through := rng.Int64N(n)
			sum := summaryMsg(fmt.Sprintf("sum-%d", step), fmt.Sprintf("summary at step %d", step))
			got := compact(t, s, storage.CompactRequest{Ref: l.ref, ThroughMessageID: l.model.msgs[through].GetId(), Summary: sum})
			_, stored := loadView(t, s, l.ref, storage.LoadOptions{View: storage.ViewContext, Limit: 1})
			if got.Compaction.ThroughCount != through+1 || len(stored) != 1 {
				t.Fatalf("step %d: compaction through %d answered %+v, context view starts %v", step, through+1, got.Compaction, ids(stored))
			}
			l.model.cs = append(l.model.cs[:len(l.model.cs):len(l.model.cs)], modelCompaction{through + 1, stored[0]})
		case op < 8:
			keep := rng.Int64N(n + 1)
			f, err := s.Fork(t.Context(), storage.ForkRequest{Ref: l.ref, MessageCount: keep})
			must(t, "Fork", err)
			if keep == 0 {
				keep = n
			}
			sessions = append(sessions, &live{ref: storage.Ref{ID: f.ID}, model: l.model.keep(keep)})
		default:
			keep := rng.Int64N(n + 1)
			_, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: l.ref, MessageCount: keep})
			must(t, "Rewind", err)
			l.model = l.model.keep(keep)
		}
		checkCompactModel(t, fmt.Sprintf("step %d, session %s", step, l.ref.ID), s, l.ref, l.model, rng)
		if last := sessions[len(sessions)-1]; last != l {
			checkCompactModel(t, fmt.Sprintf("step %d, session %s", step, last.ref.ID), s, last.ref, last.model, rng)
		}
	}
	for _, l := range sessions {
		checkCompactModel(t, "at the end, session "+l.ref.ID, s, l.ref, l.model, rng)
	}
}

func checkCompactModel(t *testing.T, what string, s *storage.Store, ref storage.Ref, m compactModel, rng *rand.Rand) {
	t.Helper()
	se, full := loadAll(t, s, ref)
	if !sameMsgs(m.msgs, full) {
		t.Fatalf("%s: full view (-want +got):\n%s", what, cmpMsgs(m.msgs, full))
	}
	view := m.contextView()
	if se.ContextMessageCount() != int64(len(view)) {
		t.Fatalf("%s: context message count %d, want %d", what, se.ContextMessageCount(), len(view))
	}
	o := storage.LoadOptions{View: storage.ViewContext}
	if rng.IntN(2) == 0 {
		o.Limit = rng.Int64N(int64(len(view)) + 2)
		if o.Tail = rng.IntN(2) == 0; !o.Tail {
			o.Offset = rng.Int64N(int64(len(view)) + 2)
		}
	}
	_, got := loadView(t, s, ref, o)
	from, to := o.Window(int64(len(view)))
	if !sameMsgs(view[from:to], got) {
		t.Fatalf("%s: context view with %+v (-want +got):\n%s", what, o, cmpMsgs(view[from:to], got))
	}
}

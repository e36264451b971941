package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// calling returns an assistant message that makes tool calls with the
// given ids, written by model with usage in/out tokens.
func calling(id, model string, in, out int64, calls ...string) *sessiondv1.Message {
	m := &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_ASSISTANT, Model: model,
		Usage: &sessiondv1.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: in / 2, ReasoningTokens: out / 2}}
	for _, c := range calls {
		m.ToolCalls = append(m.ToolCalls, &sessiondv1.ToolCall{Id: c, Name: "f", Arguments: "{}"})
	}
	return m
}

// result returns a ROLE_TOOL message answering call.
func result(id, call string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: call, Content: "ok " + call}
}

// wantField fails unless err is ErrInvalid naming field.
func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var fe *storage.FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: got error %v, want ErrInvalid naming %s", what, err, field)
	}
}

func wantTally(t *testing.T, what string, got *storage.Session, want storage.Tally) {
	t.Helper()
	if d := cmp.Diff(want, got.Tally, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("%s: tally (-want +got):\n%s", what, d)
	}
}

func usage(in, out int64) storage.Usage {
	return storage.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: in / 2, ReasoningTokens: out / 2}
}

// testTally checks the tally every write keeps (open tool calls, usage
// totals, models) and the pairing rule every write applies.
func testTally(t *testing.T, h *harness) {
	ctx := t.Context()
	s, addr := h.openData(t)

	t.Run("Create", func(t *testing.T) {
		se := create(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{
			msg("u", "hi"), calling("a1", "m-1", 10, 4, "c1", "c2"), result("r1", "c1"),
			calling("a2", "m-2", 20, 6, "c3"), calling("a3", "m-1", 30, 8),
		}})
		wantTally(t, "create", se, storage.Tally{OpenToolCallIDs: []string{"c2", "c3"}, Usage: usage(60, 18), Models: []string{"m-1", "m-2"}})
		wantTally(t, "get", get(t, s, storage.Ref{Namespace: nsA, ID: se.ID}), se.Tally)
		// Results before their call, a second result, an unknown call, a
		// call id that is still open: each names its field.
		for _, c := range []struct {
			msgs  []*sessiondv1.Message
			field string
		}{
			{[]*sessiondv1.Message{result("r", "c1"), calling("a", "m", 1, 1, "c1")}, "messages[0].tool_call_id"},
			{[]*sessiondv1.Message{calling("a", "m", 1, 1, "c1"), result("r1", "c1"), result("r2", "c1")}, "messages[2].tool_call_id"},
			{[]*sessiondv1.Message{msg("u", "x"), result("r", "nope")}, "messages[1].tool_call_id"},
			{[]*sessiondv1.Message{calling("a", "m", 1, 1, "c1"), calling("b", "m", 1, 1, "c2", "c1")}, "messages[1].tool_calls[1].id"},
		} {
			_, err := s.Create(ctx, storage.CreateRequest{Namespace: nsA, Messages: c.msgs})
			wantField(t, "create "+c.field, err, c.field)
		}
		// A ROLE_TOOL message without a tool_call_id answers nothing and is allowed.
		se = create(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{calling("a", "", 0, 0, "c1"), result("r", "")}})
		wantTally(t, "tool message without a call id", se, storage.Tally{OpenToolCallIDs: []string{"c1"}})
		// An answered id may be used again by a later call.
		se = create(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{
			calling("a", "", 0, 0, "c1"), result("r", "c1"), calling("b", "", 0, 0, "c1"),
		}})
		wantTally(t, "a call id used again", se, storage.Tally{OpenToolCallIDs: []string{"c1"}})
	})

	t.Run("Append", func(t *testing.T) {
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{calling("a1", "m-1", 10, 4, "c1", "c2")}})
		before := takeSnapshot(t, s, ref)
		for _, c := range []struct {
			msgs  []*sessiondv1.Message
			field string
		}{
			{[]*sessiondv1.Message{result("r", "nope")}, "messages[0].tool_call_id"},
			{[]*sessiondv1.Message{result("r1", "c1"), result("r2", "c1")}, "messages[1].tool_call_id"},
			{[]*sessiondv1.Message{msg("u", "x"), calling("a2", "m", 1, 1, "c2")}, "messages[1].tool_calls[0].id"},
		} {
			_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: c.msgs})
			wantField(t, "append "+c.field, err, c.field)
		}
		checkUnchanged(t, "refused appends", s, ref, before)
		// A call made earlier in the same batch may be answered in it; the
		// watcher's event carries the new tally.
		sub, err := s.Watch(ctx, ref, before.session.Revision)
		must(t, "Watch", err)
		defer sub.Close()
		appendMsgs(t, s, ref, result("r1", "c1"), calling("a2", "m-2", 5, 5, "c3"), result("r3", "c3"))
		got := get(t, s, ref)
		wantTally(t, "after append", got, storage.Tally{OpenToolCallIDs: []string{"c2"}, Usage: usage(15, 9), Models: []string{"m-2", "m-1"}})
		select {
		case ev := <-sub.Events():
			wantTally(t, "the append's event", ev.Session, got.Tally)
		case <-time.After(10 * time.Second):
			t.Error("no event for the append")
		}
		// The idempotent retry of an append that landed comes before the
		// rule: answering c1 again is a no-op, not an error.
		res, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{result("r1", "c1"), calling("a2", "m-2", 5, 5, "c3"), result("r3", "c3")}})
		if err != nil || res.Revision != got.Revision {
			t.Errorf("retry of a landed append: %v, revision %d, want %d", err, res.Revision, got.Revision)
		}
		// A model used again moves to the front, once.
		appendMsgs(t, s, ref, calling("a3", "m-1", 0, 0), result("r2", "c2"))
		wantTally(t, "after answering the last call", get(t, s, ref), storage.Tally{Usage: usage(15, 9), Models: []string{"m-1", "m-2"}})
	})

	t.Run("SaveRewindFork", func(t *testing.T) {
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsB})
		_, err := s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: []*sessiondv1.Message{result("r", "c9")}})
		wantField(t, "save of an unanswerable result", err, "messages[0].tool_call_id")
		convo := []*sessiondv1.Message{
			msg("u1", "q"), calling("a1", "m-1", 100, 10, "c1", "c2"), result("r1", "c1"), result("r2", "c2"),
			calling("a2", "m-2", 200, 20, "c3", "c4"), result("r3", "c3"),
			calling("a3", "m-3", 400, 40),
		}
		saved, err := s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: convo})
		must(t, "Save", err)
		wantTally(t, "save", saved, storage.Tally{OpenToolCallIDs: []string{"c4"}, Usage: usage(700, 70), Models: []string{"m-3", "m-2", "m-1"}})

		// Rewind recounts what is kept: before a3, c4 is still open; before
		// r3, c3 is open again; before a2, nothing is.
		for _, c := range []struct {
			keep int64
			want storage.Tally
		}{
			{6, storage.Tally{OpenToolCallIDs: []string{"c4"}, Usage: usage(300, 30), Models: []string{"m-2", "m-1"}}},
			{5, storage.Tally{OpenToolCallIDs: []string{"c3", "c4"}, Usage: usage(300, 30), Models: []string{"m-2", "m-1"}}},
			{4, storage.Tally{Usage: usage(100, 10), Models: []string{"m-1"}}},
			{0, storage.Tally{}},
		} {
			fk, err := s.Fork(ctx, storage.ForkRequest{Ref: ref, MessageCount: c.keep})
			if c.keep == 0 {
				// Fork's 0 means all.
				must(t, "Fork all", err)
				wantTally(t, "fork of all", fk, saved.Tally)
			} else {
				must(t, "Fork", err)
				wantTally(t, fmt.Sprintf("fork of %d", c.keep), fk, c.want)
				wantTally(t, fmt.Sprintf("get of the fork of %d", c.keep), get(t, s, storage.Ref{Namespace: nsB, ID: fk.ID}), c.want)
			}
			rw, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref, MessageCount: c.keep})
			must(t, "Rewind", err)
			wantTally(t, fmt.Sprintf("rewind to %d", c.keep), rw, c.want)
			wantTally(t, fmt.Sprintf("get after rewind to %d", c.keep), get(t, s, ref), c.want)
			if c.keep > 0 {
				_, err = s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: convo})
				must(t, "Save again", err)
			}
		}
		// After a rewind, a result for a call open again is accepted.
		_, err = s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: convo})
		must(t, "Save again", err)
		_, err = s.Rewind(ctx, storage.RewindRequest{Ref: ref, MessageCount: 5})
		must(t, "Rewind", err)
		appendMsgs(t, s, ref, result("r3-again", "c3"))
		wantTally(t, "answer after a rewind", get(t, s, ref), storage.Tally{OpenToolCallIDs: []string{"c4"}, Usage: usage(300, 30), Models: []string{"m-2", "m-1"}})
	})

	t.Run("ModelFilter", func(t *testing.T) {
		a := create(t, s, storage.CreateRequest{Namespace: nsB, Messages: []*sessiondv1.Message{calling("a", "filter-x", 1, 1)}})
		b := create(t, s, storage.CreateRequest{Namespace: nsB, Messages: []*sessiondv1.Message{calling("a", "filter-y", 1, 1)}})
		pause()
		appendMsgs(t, s, storage.Ref{Namespace: nsB, ID: b.ID}, calling("b", "filter-x", 1, 1))
		if got := sessionIDs(listAll(t, s, storage.ListOptions{Namespace: nsB, Model: "filter-x"})); !cmp.Equal(got, []string{b.ID, a.ID}) {
			t.Errorf("model filter-x: %v, want [%s %s]", got, b.ID, a.ID)
		}
		if got := sessionIDs(listAll(t, s, storage.ListOptions{Namespace: nsB, Model: "filter-y"})); !cmp.Equal(got, []string{b.ID}) {
			t.Errorf("model filter-y: %v, want [%s]", got, b.ID)
		}
		if got := listAll(t, s, storage.ListOptions{Namespace: nsA, Model: "filter-x"}); len(got) != 0 {
			t.Errorf("model filter in another namespace: %v", sessionIDs(got))
		}
		err := s.List(ctx, storage.ListOptions{Namespace: nsB, Model: string(make([]byte, storage.MaxModelBytes+1))}, func(*storage.Session) error { return nil })
		wantField(t, "a model filter too long", err, "model")
	})

	t.Run("ExpireAfter", func(t *testing.T) {
		se, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, ExpireAfter: 36 * time.Hour, Messages: msgs("e", 1)})
		if se.ExpireAfter != 36*time.Hour || get(t, s, ref).ExpireAfter != 36*time.Hour {
			t.Errorf("expire_after after create: %v, get %v", se.ExpireAfter, get(t, s, ref).ExpireAfter)
		}
		fk, err := s.Fork(ctx, storage.ForkRequest{Ref: ref})
		must(t, "Fork", err)
		if fk.ExpireAfter != 36*time.Hour {
			t.Errorf("fork's expire_after %v, want the source's", fk.ExpireAfter)
		}
		up, err := s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateExpireAfter, ExpireAfter: 2 * time.Second})
		must(t, "Update", err)
		if up.ExpireAfter != 2*time.Second || up.Revision != se.Revision+1 {
			t.Errorf("update: expire_after %v, revision %d", up.ExpireAfter, up.Revision)
		}
		for _, d := range []time.Duration{-time.Second, time.Millisecond, storage.MaxExpireAfter + time.Second} {
			_, err := s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateExpireAfter, ExpireAfter: d})
			wantField(t, fmt.Sprintf("update to %v", d), err, "expire_after")
			_, err = s.Create(ctx, storage.CreateRequest{Namespace: nsA, ExpireAfter: d})
			wantField(t, fmt.Sprintf("create with %v", d), err, "expire_after")
		}
		// Expired finds it once its time to live has passed since its last
		// update, and a namespace default covers sessions without their own.
		expired := func(now time.Time, defaults map[string]time.Duration) []string {
			var out []string
			err := s.Expired(ctx, storage.ExpiredOptions{Now: now, Defaults: defaults}, func(se *storage.Session) error {
				if se.Namespace == nsA {
					out = append(out, se.ID)
				}
				return nil
			})
			must(t, "Expired", err)
			return sortedIDs(out...)
		}
		if got := expired(up.UpdatedAt.Add(time.Second), nil); len(got) != 0 {
			t.Errorf("expired a second after the update: %v", got)
		}
		if got := expired(up.UpdatedAt.Add(2*time.Second), nil); !cmp.Equal(got, []string{se.ID}) {
			t.Errorf("expired at its time to live: %v, want [%s]", got, se.ID)
		}
		far := time.Now().Add(400 * 24 * time.Hour)
		all := sessionIDs(listAll(t, s, storage.ListOptions{Namespace: nsA}))
		if got := expired(far, map[string]time.Duration{nsA: 365 * 24 * time.Hour}); !cmp.Equal(got, sortedIDs(all...)) {
			t.Errorf("with a namespace default, %d expired, want all %d of %q", len(got), len(all), nsA)
		}
		if got := expired(far, map[string]time.Duration{nsB: time.Hour}); len(got) != 2 { // se, and its fork (36h)
			t.Errorf("a default of another namespace expired %d sessions of %q, want the 2 with their own", len(got), nsA)
		}
		up, err = s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateExpireAfter})
		must(t, "Update to none", err)
		if up.ExpireAfter != 0 || get(t, s, ref).ExpireAfter != 0 {
			t.Errorf("expire_after after removing it: %v", up.ExpireAfter)
		}
	})

	// Everything above survives a close and an open.
	h.reopen(t, "after reopen", s, addr)
}

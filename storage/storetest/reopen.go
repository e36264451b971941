package storetest

import (
	"sync"
	"testing"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// state is every session of the suite's namespaces with its messages, in
// list order.
type state []snapshot

func takeState(t *testing.T, s *storage.Store) state {
	t.Helper()
	var out state
	for _, ns := range namespaces {
		for _, se := range listAll(t, s, storage.ListOptions{Namespace: ns}) {
			out = append(out, takeSnapshot(t, s, storage.Ref{Namespace: ns, ID: se.ID}))
		}
	}
	return out
}

func checkState(t *testing.T, what string, want, got state) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d sessions, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := diffSession(want[i].session, got[i].session); d != "" {
			t.Errorf("%s: session %d (-want +got):\n%s", what, i, d)
		}
		if d := cmpMsgs(want[i].msgs, got[i].msgs); d != "" {
			t.Errorf("%s: messages of session %s:\n%s", what, want[i].session.ID, d)
		}
	}
}

// testReopen checks that every acknowledged write survives closing the store
// and opening it again on the same data, and that the reopened store keeps
// every rule about what was there before.
func testReopen(t *testing.T, h *harness) {
	ctx := t.Context()
	s1, addr := h.openData(t)

	// One of every kind of write.
	a := create(t, s1, storage.CreateRequest{Alias: "keep", Title: "t", Summary: "s",
		Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "1"}, Messages: oddMessages()})
	refA := storage.Ref{ID: a.ID}
	appendMsgs(t, s1, refA, msgs("a", 2)...)
	landed := msgs("landed", 2)
	appendMsgs(t, s1, refA, landed...)
	_, err := s1.Update(ctx, storage.UpdateRequest{Ref: refA, Fields: storage.UpdateTitle | storage.UpdateLabels, Title: "t2", Labels: map[string]string{"l": "2"}})
	must(t, "Update", err)
	bID := uuid.NewString()
	create(t, s1, storage.CreateRequest{Namespace: nsA, ID: bID, Messages: msgs("b", 3)})
	refB := storage.Ref{Namespace: nsA, ID: bID}
	_, err = s1.Save(ctx, storage.SaveRequest{Ref: refB, Title: "saved", Messages: msgs("saved", 4)})
	must(t, "Save", err)
	_, err = s1.Rewind(ctx, storage.RewindRequest{Ref: refB, MessageCount: 1})
	must(t, "Rewind", err)
	_, err = s1.Fork(ctx, storage.ForkRequest{Ref: refA, MessageCount: 2, Alias: "forked"})
	must(t, "Fork", err)
	gone := create(t, s1, storage.CreateRequest{Namespace: nsB, Alias: "gone"})
	must(t, "Delete", s1.Delete(ctx, storage.Ref{Namespace: nsB, ID: gone.ID}, 0))
	renamed := create(t, s1, storage.CreateRequest{Alias: "old-name"})
	_, err = s1.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: renamed.ID}, Fields: storage.UpdateAlias, Alias: "new-name"})
	must(t, "Update alias", err)
	_, err = s1.Save(ctx, storage.SaveRequest{Ref: storage.Ref{Namespace: nsB, Alias: "made-by-save"}, CreateIfMissing: true, Messages: msgs("mbs", 1)})
	must(t, "Save creating", err)

	checkInvariants(t, s1)
	s2 := h.reopen(t, "after reopen", s1, addr)
	_, err = s2.Get(ctx, storage.Ref{Namespace: nsB, ID: gone.ID})
	wantErr(t, "Get of a session deleted before the reopen", err, storage.ErrNotFound)
	_, err = s2.Get(ctx, storage.Ref{Alias: "old-name"})
	wantErr(t, "Get by an alias changed before the reopen", err, storage.ErrNotFound)

	// The rules still hold for what was stored before.
	cur := get(t, s2, refA)
	res, err := s2.Append(ctx, storage.AppendRequest{Ref: refA, Messages: landed, ExpectedRevision: 1})
	must(t, "retry after reopen of an append that landed", err)
	if res.Revision != cur.Revision || res.MessageCount != cur.MessageCount {
		t.Errorf("retried append after reopen = %+v, want the current revision %d and count %d", res, cur.Revision, cur.MessageCount)
	}
	_, err = s2.Append(ctx, storage.AppendRequest{Ref: refA, Messages: []*sessiondv1.Message{msg("fresh", "x"), msg(landed[0].GetId(), "other")}})
	wantErr(t, "append of a new message and a stored id with other content", err, storage.ErrMessageConflict)
	_, err = s2.Create(ctx, storage.CreateRequest{Alias: "keep"})
	wantErr(t, "Create with an alias taken before the reopen", err, storage.ErrAliasInUse)
	_, err = s2.Create(ctx, storage.CreateRequest{Namespace: nsA, ID: bID, Title: "other"})
	wantErr(t, "Create with an id taken before the reopen", err, storage.ErrAlreadyExists)
	_, err = s2.Append(ctx, storage.AppendRequest{Ref: refA, Messages: msgs("stale", 1), ExpectedRevision: cur.Revision - 1})
	wantErr(t, "append with a stale revision after reopen", err, storage.ErrConflict)
	res = appendMsgs(t, s2, refA, msgs("after", 1)...)
	if res.Revision != cur.Revision+1 {
		t.Errorf("first append after reopen is at revision %d, want %d", res.Revision, cur.Revision+1)
	}
	create(t, s2, storage.CreateRequest{Alias: "old-name"}) // freed before the reopen

	// And a second cycle keeps what the reopened store acknowledged.
	h.reopen(t, "after the second reopen", s2, addr)
}

// testSecondOpen checks a second store opened on data another store holds:
// with a shared backend, each sees the other's writes and every rule holds
// across them; otherwise the second open fails with ErrLocked and the data
// opens again once the first store is closed.
func testSecondOpen(t *testing.T, h *harness) {
	ctx := t.Context()
	s1, addr := h.openData(t)
	se, ref := createRef(t, s1, storage.CreateRequest{Alias: "shared", Messages: msgs("m", 1)})

	if !h.Shared {
		_, err := h.openOn(t, addr)
		wantErr(t, "a second Open on data held by an open store", err, storage.ErrLocked)
		appendMsgs(t, s1, ref, msgs("still", 1)...) // the failed open disturbed nothing
		h.reopen(t, "after the holder closed", s1, addr)
		return
	}

	s2, err := h.openOn(t, addr)
	must(t, "second Open", err)
	if d := diffSession(se, get(t, s2, storage.Ref{Alias: "shared"})); d != "" {
		t.Errorf("second store's view of a session created through the first (-want +got):\n%s", d)
	}
	sub := watch(t, s1, ref, 0)

	b1 := msgs("b", 1)
	r2 := appendMsgs(t, s2, ref, b1...)
	r3 := appendMsgs(t, s1, ref, msgs("a", 1)...)
	if r2.Revision != 2 || r3.Revision != 3 || r3.MessageCount != 3 {
		t.Errorf("appends through both stores = %+v then %+v, want revisions 2 and 3 with 3 messages", r2, r3)
	}
	_, err = s2.Append(ctx, storage.AppendRequest{Ref: ref, Messages: msgs("stale", 1), ExpectedRevision: 2})
	wantErr(t, "append through the second store with a revision the first moved on", err, storage.ErrConflict)
	res, err := s1.Append(ctx, storage.AppendRequest{Ref: ref, Messages: b1, ExpectedRevision: 1})
	must(t, "retry through the first store of an append made through the second", err)
	if want := (storage.AppendResult{Revision: r3.Revision, MessageCount: r3.MessageCount}); res != want {
		t.Errorf("retried append = %+v, want the current state %+v", res, want)
	}
	res, err = s1.Append(ctx, storage.AppendRequest{Ref: ref, Messages: append(msgs("b", 1), msg("new", "x"))})
	must(t, "append of a message stored through the other store and a new one", err)
	if want := (storage.AppendResult{Revision: r3.Revision + 1, MessageCount: r3.MessageCount + 1, Appended: 1}); res != want {
		t.Errorf("append of a message stored through the other store and a new one = %+v, want %+v", res, want)
	}
	_, err = s2.Create(ctx, storage.CreateRequest{Alias: "shared"})
	wantErr(t, "Create through the second store of an alias the first holds", err, storage.ErrAliasInUse)

	// The same alias created through both at once: exactly one wins.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*storage.Store{s1, s2} {
		wg.Go(func() { _, errs[i] = s.Create(ctx, storage.CreateRequest{Namespace: nsA, Alias: "race"}) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Errorf("creates of one alias through both stores = %v, %v; want exactly one to win", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil {
			wantErr(t, "the losing create", err, storage.ErrAliasInUse)
		}
	}

	_, err = s1.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle, Title: "through s1"})
	must(t, "Update", err)
	checkState(t, "the second store's view", takeState(t, s1), takeState(t, s2))

	// The watcher on the first store sees the writes made through both, in
	// order.
	checkEvent(t, s1, nextEvent(t, sub), storage.EventAppended, 2)
	checkEvent(t, s1, nextEvent(t, sub), storage.EventAppended, 3)
	checkEvent(t, s1, nextEvent(t, sub), storage.EventAppended, 4)
	checkEvent(t, s1, nextEvent(t, sub), storage.EventUpdated, 5)
	must(t, "Delete through the second store", s2.Delete(ctx, ref, 5))
	checkEvent(t, s1, nextEvent(t, sub), storage.EventDeleted, 6)
	_, err = s1.Get(ctx, ref)
	wantErr(t, "Get through the first store of a session deleted through the second", err, storage.ErrNotFound)
	checkInvariants(t, s2)
}

package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func testAppend(t *testing.T, h *harness) {
	t.Run("Basic", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{Alias: "chat", Messages: msgs("seed", 1)})
		ref := storage.Ref{Alias: "chat"}
		var sent []*sessiondv1.Message
		sent = append(sent, msgs("seed", 1)...)
		for i, batch := range [][]*sessiondv1.Message{msgs("a", 1), msgs("b", 3), msgs("c", 2)} {
			prev := get(t, s, ref)
			pause()
			res := appendMsgs(t, s, ref, batch...)
			sent = append(sent, batch...)
			if want := (storage.AppendResult{Revision: uint64(i + 2), MessageCount: int64(len(sent)), Appended: int64(len(batch))}); res != want {
				t.Errorf("append %d answered %+v, want %+v", i, res, want)
			}
			got := get(t, s, ref)
			if got.Revision != res.Revision || got.MessageCount != res.MessageCount {
				t.Errorf("after append %d Get says revision %d, %d messages; Append said %+v", i, got.Revision, got.MessageCount, res)
			}
			if !got.UpdatedAt.After(prev.UpdatedAt) {
				t.Errorf("append %d did not move updated_at forward: %v then %v", i, prev.UpdatedAt, got.UpdatedAt)
			}
			if !got.CreatedAt.Equal(se.CreatedAt) {
				t.Errorf("append %d changed created_at from %v to %v", i, se.CreatedAt, got.CreatedAt)
			}
		}
		_, ms := loadAll(t, s, ref)
		checkMessages(t, "Load after appends", ms, sent)
	})

	t.Run("FillsIDAndCreatedAt", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{})
		clientTime := time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC)
		withTime := msg("timed", "x")
		withTime.CreatedAt = timestamppb.New(clientTime)
		sent := []*sessiondv1.Message{
			{Role: sessiondv1.Role_ROLE_USER, Content: "no id"},
			{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "no id either"},
			withTime,
		}
		before := time.Now()
		appendMsgs(t, s, ref, sent...)
		after := time.Now()
		_, ms := loadAll(t, s, ref)
		checkMessages(t, "Load", ms, sent)
		if len(ms) != 3 {
			t.FailNow()
		}
		if ms[0].GetId() == "" || ms[0].GetId() == ms[1].GetId() {
			t.Errorf("filled-in ids %q and %q: want distinct non-empty ids", ms[0].GetId(), ms[1].GetId())
		}
		for _, m := range ms[:2] {
			checkTimeBetween(t, "filled-in created_at", m.GetCreatedAt().AsTime(), before, after)
		}
		if !ms[2].GetCreatedAt().AsTime().Equal(clientTime) {
			t.Errorf("client created_at %v came back as %v", clientTime, ms[2].GetCreatedAt().AsTime())
		}
		if sent[0].Id != "" || sent[0].CreatedAt != nil {
			t.Errorf("Append modified the caller's message: %v", sent[0])
		}
	})

	t.Run("IdempotentRetry", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA})
		ab := []*sessiondv1.Message{msg("a", "first"), msg("b", "second")} // no created_at
		r1 := appendMsgs(t, s, ref, ab...)
		r2 := appendMsgs(t, s, ref, msg("c", "third"))
		want := storage.AppendResult{Revision: 3, MessageCount: 3} // a no-op appends none
		if r1.Revision != 2 || r1.Appended != 2 || r2 != (storage.AppendResult{Revision: 3, MessageCount: 3, Appended: 1}) {
			t.Fatalf("appends answered %+v then %+v, want revision 2 with 2 appended, then revision 3 with 1", r1, r2)
		}
		before := takeSnapshot(t, s, ref)

		// A retry of a batch that landed (its answer lost) is a no-op that
		// answers the current state, even with a stale expected revision:
		// the no-op check comes before the revision check.
		for _, c := range []struct {
			name     string
			expected uint64
			batch    []*sessiondv1.Message
		}{
			{"retry", 0, ab},
			{"retry with its stale expected revision", 1, ab},
			{"retry of the last batch with its expected revision", 2, []*sessiondv1.Message{msg("c", "third")}},
			{"retry of part of a batch", 0, ab[1:]},
			{"retry with a future expected revision", 99, ab},
		} {
			res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: c.batch, ExpectedRevision: c.expected})
			if err != nil || res != want {
				t.Errorf("%s: got %+v, %v; want %+v, nil", c.name, res, err, want)
			}
		}
		// The retry carries the created_at the store filled in: still the same.
		_, stored := loadAll(t, s, ref)
		res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: stored[:2]})
		if err != nil || res != want {
			t.Errorf("retry with the stored created_at: got %+v, %v; want %+v, nil", res, err, want)
		}
		checkUnchanged(t, "retried appends", s, ref, before)

		// A message id already there with other content is refused, and
		// nothing of its batch is stored, not even the new messages.
		other := timestamppb.New(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
		for _, c := range []struct {
			name  string
			batch []*sessiondv1.Message
		}{
			{"same id, other content", []*sessiondv1.Message{msg("a", "FIRST")}},
			{"same id, other role", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "first"}}},
			{"same id, other created_at", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Content: "first", CreatedAt: other}}},
			{"same id, extra metadata", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Content: "first", Metadata: map[string]string{"k": "v"}}}},
			{"stored, other content", []*sessiondv1.Message{msg("a", "first"), msg("b", "SECOND")}},
			{"new, stored, then other content", []*sessiondv1.Message{msg("d", "new"), msg("a", "first"), msg("c", "THIRD"), {Role: sessiondv1.Role_ROLE_USER, Content: "x"}}},
		} {
			_, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: c.batch})
			wantErr(t, "Append "+c.name, err, storage.ErrMessageConflict)
		}
		checkUnchanged(t, "refused appends", s, ref, before)

		// Repeated ids within a batch are a malformed request.
		_, err = s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("x", "1"), msg("x", "1")}})
		wantErr(t, "Append with an id twice in the batch", err, storage.ErrInvalid)
		_, err = s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("a", "first"), msg("a", "first")}})
		wantErr(t, "Append with a stored id twice in the batch", err, storage.ErrInvalid)
		checkUnchanged(t, "malformed appends", s, ref, before)

		// A message that is removed (rewind) may be appended again.
		rw, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 2})
		must(t, "Rewind", err)
		res, err = s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("c", "third again")}})
		if err != nil || res.Revision != rw.Revision+1 || res.MessageCount != 3 {
			t.Errorf("appending a rewound id again: got %+v, %v; want revision %d, 3 messages", res, err, rw.Revision+1)
		}
	})

	t.Run("StoredAndNew", func(t *testing.T) {
		// A batch that holds messages already stored stores only the
		// others, in batch order, as one change.
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Messages: []*sessiondv1.Message{msg("a", "first"), msg("b", "second")}})
		sub := watch(t, s, ref, 0)
		before := takeSnapshot(t, s, ref)

		noID := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "no id"}
		batch := []*sessiondv1.Message{msg("c", "third"), msg("a", "first"), noID, msg("b", "second"), msg("d", "fourth")}
		// The expected revision applies, since the batch has new messages.
		_, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: batch, ExpectedRevision: se.Revision + 1})
		wantErr(t, "a mixed batch with a stale expected revision", err, storage.ErrConflict)
		checkUnchanged(t, "a mixed batch refused", s, ref, before)

		res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: batch, ExpectedRevision: se.Revision})
		must(t, "Append of stored and new messages", err)
		if want := (storage.AppendResult{Revision: se.Revision + 1, MessageCount: 5, Appended: 3}); res != want {
			t.Errorf("Append of stored and new messages = %+v, want %+v", res, want)
		}
		_, ms := loadAll(t, s, ref)
		checkMessages(t, "Load after the mixed append", ms, []*sessiondv1.Message{msg("a", "first"), msg("b", "second"), msg("c", "third"), noID, msg("d", "fourth")})
		ev := nextEvent(t, sub)
		if ev.Type != storage.EventAppended || ev.Revision != res.Revision || len(ev.Messages) != 3 ||
			ev.Messages[0].GetId() != "c" || ev.Messages[1].GetContent() != "no id" || ev.Messages[2].GetId() != "d" {
			t.Errorf("the mixed append's event = %v at revision %d with %d messages, want EventAppended at %d with c, the one without id, d", ev.Type, ev.Revision, len(ev.Messages), res.Revision)
		}

		// Sent again, whole (its id-less message is new each time) or
		// without it (a no-op), whatever its expected revision says.
		after := takeSnapshot(t, s, ref)
		retry := []*sessiondv1.Message{msg("c", "third"), msg("a", "first"), msg("b", "second"), msg("d", "fourth")}
		res, err = s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: retry, ExpectedRevision: se.Revision})
		if want := (storage.AppendResult{Revision: se.Revision + 1, MessageCount: 5}); err != nil || res != want {
			t.Errorf("retry of the stored messages = %+v, %v; want %+v, nil", res, err, want)
		}
		checkUnchanged(t, "a retry of stored messages", s, ref, after)
	})

	t.Run("Errors", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{Namespace: nsA})
		_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{Namespace: nsA, ID: uuid.NewString()}, Messages: msgs("a", 1)})
		wantErr(t, "Append to a missing session", err, storage.ErrNotFound)
		_, err = s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{Namespace: nsB, ID: se.ID}, Messages: msgs("a", 1)})
		wantErr(t, "Append to the id in another namespace", err, storage.ErrNotFound)
		_, err = s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{Namespace: nsA, Alias: "none"}, Messages: msgs("a", 1)})
		wantErr(t, "Append to a missing alias", err, storage.ErrNotFound)
		_, err = s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: "bad"}, Messages: msgs("a", 1)})
		wantErr(t, "Append to a malformed id", err, storage.ErrInvalid)
		if got := get(t, s, storage.Ref{Namespace: nsA, ID: se.ID}); got.Revision != 1 {
			t.Errorf("refused appends moved the revision to %d", got.Revision)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		// 100 writers append to one session at once, each retrying once as
		// if its first answer was lost. Every message lands exactly once, and
		// the revision each append got says where its message is.
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{})
		const n = 100
		results := make([]storage.AppendResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				m := msg(fmt.Sprintf("w%03d", i), fmt.Sprintf("from writer %d", i))
				res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{m}})
				if err != nil {
					errs[i] = err
					return
				}
				results[i] = res
				retry, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{m}, ExpectedRevision: res.Revision})
				if err != nil {
					errs[i] = fmt.Errorf("retry: %w", err)
				} else if retry.Revision < res.Revision || retry.MessageCount < res.MessageCount {
					errs[i] = fmt.Errorf("retry answered %+v, before %+v: went backwards", retry, res)
				}
			})
		}
		wg.Wait()
		byRevision := make(map[uint64]int)
		for i := range n {
			if errs[i] != nil {
				t.Errorf("writer %d: %v", i, errs[i])
				continue
			}
			r := results[i]
			if j, dup := byRevision[r.Revision]; dup {
				t.Errorf("writers %d and %d both got revision %d", j, i, r.Revision)
			}
			byRevision[r.Revision] = i
			if r.Revision < 2 || r.Revision > n+1 || r.MessageCount != int64(r.Revision-1) {
				t.Errorf("writer %d got %+v: want a revision in 2..%d and message count revision-1", i, r, n+1)
			}
		}
		got, ms := loadAll(t, s, ref)
		if got.Revision != n+1 || got.MessageCount != n || len(ms) != n {
			t.Fatalf("after %d appends: revision %d, count %d, %d messages; want %d, %d, %d", n, got.Revision, got.MessageCount, len(ms), n+1, n, n)
		}
		for idx, m := range ms {
			w, ok := byRevision[uint64(idx+2)]
			if want := fmt.Sprintf("w%03d", w); !ok || m.GetId() != want {
				t.Errorf("message %d is %q; the append that got revision %d was %q", idx, m.GetId(), idx+2, want)
			}
		}
	})
}

func testSave(t *testing.T, h *harness) {
	t.Run("Replaces", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{
			Namespace: nsA, Alias: "keep", Title: "old title", Summary: "old summary",
			Metadata: map[string]string{"old": "1"}, Labels: map[string]string{"env": "dev"},
			Messages: msgs("old", 3),
		})
		ref := storage.Ref{Namespace: nsA, ID: se.ID}
		pause()
		newMsgs := append(msgs("new", 2), msg("old-1", "the same id with new content is fine in a save"))
		got, err := s.Save(t.Context(), storage.SaveRequest{
			Ref: ref, ExpectedRevision: 1, Title: "new title", Summary: "new summary",
			Metadata: map[string]string{"new": "2"}, Messages: newMsgs,
		})
		must(t, "Save", err)
		want := &storage.Session{
			ID: se.ID, Namespace: nsA, Alias: "keep", Title: "new title", Summary: "new summary",
			CreatedAt: se.CreatedAt, UpdatedAt: got.UpdatedAt, Revision: 2, MessageCount: 3,
			Metadata: map[string]string{"new": "2"}, Labels: map[string]string{"env": "dev"},
		}
		if d := diffSession(want, got); d != "" {
			t.Errorf("Save answered (-want +got):\n%s", d)
		}
		if !got.UpdatedAt.After(se.UpdatedAt) {
			t.Errorf("Save did not move updated_at forward: %v then %v", se.UpdatedAt, got.UpdatedAt)
		}
		loaded, ms := loadAll(t, s, ref)
		if d := diffSession(got, loaded); d != "" {
			t.Errorf("Load after Save (-save +load):\n%s", d)
		}
		checkMessages(t, "Load after Save", ms, newMsgs)

		// Saving empty fields clears them; alias and labels still stay.
		got, err = s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: nsA, Alias: "keep"}})
		must(t, "Save of nothing", err)
		if got.Revision != 3 || got.MessageCount != 0 || got.Title != "" || got.Summary != "" || len(got.Metadata) != 0 ||
			got.Alias != "keep" || got.Labels["env"] != "dev" {
			t.Errorf("Save of nothing answered %+v: want revision 3, everything cleared but alias and labels", got)
		}
	})

	t.Run("NoOp", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{Title: "t", Messages: msgs("m", 2)})
		req := storage.SaveRequest{
			Ref: ref, ExpectedRevision: 1, Title: "t2", Summary: "s",
			Metadata: map[string]string{"k": "v"}, Messages: msgs("n", 3), // no created_at
		}
		first, err := s.Save(t.Context(), req)
		must(t, "Save", err)
		if first.Revision != 2 {
			t.Fatalf("Save answered revision %d, want 2", first.Revision)
		}
		before := takeSnapshot(t, s, ref)
		// A retried save (same request, now-stale expected revision) is a
		// no-op, as is saving what is stored, with the stored created_at.
		again, err := s.Save(t.Context(), req)
		must(t, "retried Save", err)
		if d := diffSession(first, again); d != "" {
			t.Errorf("retried Save (-first +retry):\n%s", d)
		}
		same := req
		same.ExpectedRevision = 0
		same.Messages = before.msgs
		again, err = s.Save(t.Context(), same)
		must(t, "Save of the stored content", err)
		if d := diffSession(first, again); d != "" {
			t.Errorf("Save of the stored content (-first +again):\n%s", d)
		}
		checkUnchanged(t, "no-op saves", s, ref, before)

		// Any difference is a change.
		changed := req
		changed.ExpectedRevision = 2
		changed.Summary = "other"
		got, err := s.Save(t.Context(), changed)
		if err != nil || got.Revision != 3 {
			t.Errorf("Save with another summary: %+v, %v; want revision 3", got, err)
		}
	})

	t.Run("CreateIfMissing", func(t *testing.T) {
		s := h.open(t)
		id := uuid.NewString()
		ref := storage.Ref{Namespace: nsA, ID: id}
		_, err := s.Save(t.Context(), storage.SaveRequest{Ref: ref, Title: "x"})
		wantErr(t, "Save of a missing session", err, storage.ErrNotFound)

		req := storage.SaveRequest{Ref: ref, Title: "made by save", Summary: "s", Metadata: map[string]string{"a": "b"}, Messages: msgs("m", 2), CreateIfMissing: true}
		before := time.Now()
		got, err := s.Save(t.Context(), req)
		after := time.Now()
		must(t, "Save create_if_missing by id", err)
		want := &storage.Session{
			ID: id, Namespace: nsA, Title: "made by save", Summary: "s", CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt,
			Revision: 1, MessageCount: 2, Metadata: map[string]string{"a": "b"},
		}
		if d := diffSession(want, got); d != "" {
			t.Errorf("Save create_if_missing answered (-want +got):\n%s", d)
		}
		checkTimeBetween(t, "created_at", got.CreatedAt, before, after)
		_, ms := loadAll(t, s, ref)
		checkMessages(t, "Load after Save create_if_missing", ms, req.Messages)
		// A retry of it is a no-op.
		again, err := s.Save(t.Context(), req)
		must(t, "retried Save create_if_missing", err)
		if d := diffSession(got, again); d != "" {
			t.Errorf("retried Save create_if_missing (-first +retry):\n%s", d)
		}
		// On an existing session it is a plain save.
		req.Title = "changed"
		again, err = s.Save(t.Context(), req)
		if err != nil || again.Revision != 2 || again.Title != "changed" {
			t.Errorf("Save create_if_missing of an existing session: %+v, %v; want revision 2", again, err)
		}

		// By alias: a new session with that alias and a new id.
		got, err = s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: nsA, Alias: "by-alias"}, Messages: msgs("x", 1), CreateIfMissing: true})
		must(t, "Save create_if_missing by alias", err)
		checkNewID(t, "id of a session made by save", got.ID)
		if got.Alias != "by-alias" || got.Revision != 1 || got.MessageCount != 1 || got.Namespace != nsA {
			t.Errorf("Save create_if_missing by alias answered %+v", got)
		}
		if byAlias := get(t, s, storage.Ref{Namespace: nsA, Alias: "by-alias"}); byAlias.ID != got.ID {
			t.Errorf("alias resolves to %s, want %s", byAlias.ID, got.ID)
		}

		// Ids are unique across namespaces: the id of a session in another
		// namespace is not free for a new session.
		_, err = s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: nsB, ID: id}, CreateIfMissing: true})
		wantErr(t, "Save create_if_missing with an id used in another namespace", err, storage.ErrAlreadyExists)
		if got := get(t, s, ref); got.Title != "changed" || got.Revision != 2 {
			t.Errorf("the session in the other namespace changed: %+v", got)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Messages: msgs("m", 2)})
		before := takeSnapshot(t, s, ref)
		_, err := s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: nsB, ID: se.ID}, Title: "x"})
		wantErr(t, "Save of the id in another namespace", err, storage.ErrNotFound)
		_, err = s.Save(t.Context(), storage.SaveRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("d", "1"), msg("d", "2")}})
		wantErr(t, "Save with an id twice", err, storage.ErrInvalid)
		_, err = s.Save(t.Context(), storage.SaveRequest{Ref: ref, Messages: []*sessiondv1.Message{nil}})
		wantErr(t, "Save with a nil message", err, storage.ErrInvalid)
		checkUnchanged(t, "refused saves", s, ref, before)
	})
}

func testUpdate(t *testing.T, h *harness) {
	t.Run("Fields", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{
			Namespace: nsA, Alias: "u", Title: "t", Summary: "s",
			Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "1"}, Messages: msgs("m", 2),
		})
		ref := storage.Ref{Namespace: nsA, ID: se.ID}
		_, msgsBefore := loadAll(t, s, ref)
		want := *se
		// Every request carries every value; only the masked fields change.
		full := storage.UpdateRequest{
			Ref: ref, Title: "T2", Summary: "S2", Metadata: map[string]string{"m": "2"},
			Labels: map[string]string{"l": "2", "x": "y"}, Alias: "u",
		}
		steps := []struct {
			field storage.UpdateField
			apply func(*storage.Session)
		}{
			{storage.UpdateTitle, func(w *storage.Session) { w.Title = "T2" }},
			{storage.UpdateSummary, func(w *storage.Session) { w.Summary = "S2" }},
			{storage.UpdateMetadata, func(w *storage.Session) { w.Metadata = map[string]string{"m": "2"} }},
			{storage.UpdateLabels, func(w *storage.Session) { w.Labels = map[string]string{"l": "2", "x": "y"} }},
		}
		for _, st := range steps {
			pause()
			req := full
			req.Fields = st.field
			got, err := s.Update(t.Context(), req)
			must(t, fmt.Sprintf("Update %b", st.field), err)
			st.apply(&want)
			want.Revision++
			want.UpdatedAt = got.UpdatedAt
			if d := diffSession(&want, got); d != "" {
				t.Errorf("Update %b answered (-want +got):\n%s", st.field, d)
			}
			if d := diffSession(got, get(t, s, ref)); d != "" {
				t.Errorf("Get after Update %b (-update +get):\n%s", st.field, d)
			}
		}
		// Updating to what is stored is a no-op; so are several fields at once.
		req := full
		req.Fields = storage.UpdateTitle | storage.UpdateSummary | storage.UpdateMetadata | storage.UpdateLabels | storage.UpdateAlias
		req.ExpectedRevision = 1 // stale: the no-op check comes first
		got, err := s.Update(t.Context(), req)
		must(t, "no-op Update", err)
		if d := diffSession(&want, got); d != "" {
			t.Errorf("no-op Update (-want +got):\n%s", d)
		}
		// Several fields in one update: one revision.
		req = storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle | storage.UpdateLabels, Title: "T3"}
		got, err = s.Update(t.Context(), req)
		must(t, "Update title and labels", err)
		if got.Revision != want.Revision+1 || got.Title != "T3" || len(got.Labels) != 0 || got.Summary != "S2" {
			t.Errorf("Update title and labels answered %+v; want revision %d, title T3, no labels, summary kept", got, want.Revision+1)
		}
		_, msgsAfter := loadAll(t, s, ref)
		if d := cmpMsgs(msgsBefore, msgsAfter); d != "" {
			t.Errorf("updates changed the messages (-before +after):\n%s", d)
		}
	})

	t.Run("Alias", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "old-name"})
		other := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "other"})
		ref := storage.Ref{Namespace: nsA, ID: se.ID}

		got, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: nsA, Alias: "old-name"}, Fields: storage.UpdateAlias, Alias: "new-name"})
		must(t, "rename", err)
		if got.ID != se.ID || got.Alias != "new-name" || got.Revision != 2 {
			t.Errorf("rename answered %+v; want the same id, alias new-name, revision 2", got)
		}
		if byAlias := get(t, s, storage.Ref{Namespace: nsA, Alias: "new-name"}); byAlias.ID != se.ID {
			t.Errorf("new alias resolves to %s, want %s", byAlias.ID, se.ID)
		}
		_, err = s.Get(t.Context(), storage.Ref{Namespace: nsA, Alias: "old-name"})
		wantErr(t, "Get by the old alias", err, storage.ErrNotFound)
		// The old alias is free again.
		create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "old-name"})

		// Renaming onto a taken alias is refused and changes nothing.
		before := takeSnapshot(t, s, ref)
		_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias | storage.UpdateTitle, Alias: "other", Title: "x"})
		wantErr(t, "rename onto a taken alias", err, storage.ErrAliasInUse)
		checkUnchanged(t, "refused rename", s, ref, before)
		if byAlias := get(t, s, storage.Ref{Namespace: nsA, Alias: "other"}); byAlias.ID != other.ID {
			t.Errorf("taken alias now resolves to %s, want %s", byAlias.ID, other.ID)
		}
		// The same alias in another namespace is no obstacle.
		create(t, s, storage.CreateRequest{Namespace: nsB, Alias: "elsewhere"})
		got, err = s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias, Alias: "elsewhere"})
		if err != nil || got.Alias != "elsewhere" {
			t.Errorf("rename to an alias used only in another namespace: %+v, %v", got, err)
		}

		// "" removes the alias.
		rev := got.Revision
		got, err = s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias})
		must(t, "remove alias", err)
		if got.Alias != "" || got.Revision != rev+1 {
			t.Errorf("removing the alias answered %+v; want no alias, revision %d", got, rev+1)
		}
		_, err = s.Get(t.Context(), storage.Ref{Namespace: nsA, Alias: "elsewhere"})
		wantErr(t, "Get by the removed alias", err, storage.ErrNotFound)
		if got := get(t, s, ref); got.Alias != "" {
			t.Errorf("Get after removing the alias: alias %q", got.Alias)
		}
		// Removing it again is a no-op.
		again, err := s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias})
		if err != nil || again.Revision != got.Revision {
			t.Errorf("removing a missing alias: %+v, %v; want a no-op at revision %d", again, err, got.Revision)
		}
		// And a session without alias can get one.
		got, err = s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias, Alias: "back"})
		if err != nil || got.Alias != "back" {
			t.Errorf("giving an alias: %+v, %v", got, err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Title: "t"})
		before := takeSnapshot(t, s, ref)
		_, err := s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Title: "no mask"})
		wantErr(t, "Update with no fields", err, storage.ErrInvalid)
		_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: nsB, ID: se.ID}, Fields: storage.UpdateTitle, Title: "x"})
		wantErr(t, "Update of the id in another namespace", err, storage.ErrNotFound)
		_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: nsA, Alias: "none"}, Fields: storage.UpdateTitle, Title: "x"})
		wantErr(t, "Update of a missing alias", err, storage.ErrNotFound)
		checkUnchanged(t, "refused updates", s, ref, before)
	})
}

func testDelete(t *testing.T, h *harness) {
	s := h.open(t)
	se := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "doomed", Messages: msgs("m", 3)})
	keep := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "kept"})
	ref := storage.Ref{Namespace: nsA, ID: se.ID}
	fork, err := s.Fork(t.Context(), storage.ForkRequest{Ref: ref, Alias: "fork"})
	must(t, "Fork", err)
	_, forkMsgs := loadAll(t, s, storage.Ref{Namespace: nsA, ID: fork.ID})

	before := takeSnapshot(t, s, ref)
	err = s.Delete(t.Context(), ref, 2)
	wantErr(t, "Delete with a wrong expected revision", err, storage.ErrConflict)
	err = s.Delete(t.Context(), storage.Ref{Namespace: nsB, ID: se.ID}, 0)
	wantErr(t, "Delete of the id in another namespace", err, storage.ErrNotFound)
	checkUnchanged(t, "refused deletes", s, ref, before)

	must(t, "Delete", s.Delete(t.Context(), storage.Ref{Namespace: nsA, Alias: "doomed"}, 1))
	_, err = s.Get(t.Context(), ref)
	wantErr(t, "Get after Delete", err, storage.ErrNotFound)
	_, _, err = s.Load(t.Context(), ref, storage.LoadOptions{})
	wantErr(t, "Load after Delete", err, storage.ErrNotFound)
	_, err = s.Get(t.Context(), storage.Ref{Namespace: nsA, Alias: "doomed"})
	wantErr(t, "Get by alias after Delete", err, storage.ErrNotFound)
	_, err = s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: msgs("x", 1)})
	wantErr(t, "Append after Delete", err, storage.ErrNotFound)
	err = s.Delete(t.Context(), ref, 0)
	wantErr(t, "second Delete", err, storage.ErrNotFound)
	if list := listAll(t, s, storage.ListOptions{Namespace: nsA}); slices.Contains(sessionIDs(list), se.ID) {
		t.Errorf("deleted session still listed")
	}
	// The alias is free; the other sessions are untouched.
	create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "doomed"})
	if got := get(t, s, storage.Ref{Namespace: nsA, Alias: "kept"}); got.ID != keep.ID {
		t.Errorf("other session's alias resolves to %s", got.ID)
	}
	_, ms := loadAll(t, s, storage.Ref{Namespace: nsA, ID: fork.ID})
	if d := cmpMsgs(forkMsgs, ms); d != "" {
		t.Errorf("deleting the source changed its fork's messages (-before +after):\n%s", d)
	}
	// Deleting one session frees nothing of another: its id is still taken.
	_, err = s.Create(t.Context(), storage.CreateRequest{Namespace: nsA, ID: keep.ID})
	wantErr(t, "Create with the id of a live session", err, storage.ErrAlreadyExists)
}

func testFork(t *testing.T, h *harness) {
	t.Run("All", func(t *testing.T) {
		s := h.open(t)
		src := create(t, s, storage.CreateRequest{
			Namespace: nsA, Alias: "src", Title: "T", Summary: "S",
			Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "1"}, Messages: msgs("m", 4),
		})
		srcRef := storage.Ref{Namespace: nsA, ID: src.ID}
		before := takeSnapshot(t, s, srcRef)
		t0 := time.Now()
		f, err := s.Fork(t.Context(), storage.ForkRequest{Ref: storage.Ref{Namespace: nsA, Alias: "src"}, Alias: "fork"})
		t1 := time.Now()
		must(t, "Fork", err)
		checkNewID(t, "fork id", f.ID)
		want := &storage.Session{
			ID: f.ID, Namespace: nsA, Alias: "fork", Title: "T", Summary: "S",
			CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, Revision: 1, MessageCount: 4,
			Metadata: src.Metadata, Labels: src.Labels,
			Parent: &storage.ForkOrigin{SessionID: src.ID, MessageCount: 4},
		}
		if d := diffSession(want, f); d != "" {
			t.Errorf("Fork answered (-want +got):\n%s", d)
		}
		checkTimeBetween(t, "fork created_at", f.CreatedAt, t0, t1)
		loaded, ms := loadAll(t, s, storage.Ref{Namespace: nsA, Alias: "fork"})
		if d := diffSession(f, loaded); d != "" {
			t.Errorf("Load of the fork (-fork +load):\n%s", d)
		}
		if d := cmpMsgs(before.msgs, ms); d != "" {
			t.Errorf("fork's messages differ from the source's (-source +fork):\n%s", d)
		}
		checkUnchanged(t, "Fork", s, srcRef, before)

		// The two are independent afterwards.
		appendMsgs(t, s, storage.Ref{Namespace: nsA, ID: f.ID}, msg("only-in-fork", "x"))
		checkUnchanged(t, "appending to the fork", s, srcRef, before)
		appendMsgs(t, s, srcRef, msg("only-in-source", "y"))
		if _, ms := loadAll(t, s, storage.Ref{Namespace: nsA, ID: f.ID}); len(ms) != 5 || ms[4].GetId() != "only-in-fork" {
			t.Errorf("fork's messages after appends to both: %v", ids(ms))
		}
	})

	t.Run("FirstN", func(t *testing.T) {
		s := h.open(t)
		src, ref := createRef(t, s, storage.CreateRequest{Title: "T", Messages: msgs("m", 5)})
		_, all := loadAll(t, s, ref)
		for _, n := range []int64{1, 3, 5} {
			f, err := s.Fork(t.Context(), storage.ForkRequest{Ref: ref, MessageCount: n, Title: fmt.Sprintf("first %d", n)})
			must(t, "Fork", err)
			if f.MessageCount != n || f.Title != fmt.Sprintf("first %d", n) || f.Alias != "" || f.Parent == nil || *f.Parent != (storage.ForkOrigin{SessionID: src.ID, MessageCount: n}) {
				t.Errorf("Fork of the first %d answered %+v (parent %+v)", n, f, f.Parent)
			}
			_, ms := loadAll(t, s, storage.Ref{ID: f.ID})
			if d := cmpMsgs(all[:n], ms); d != "" {
				t.Errorf("Fork of the first %d: messages (-want +got):\n%s", n, d)
			}
		}
		// A fork of a fork names its own parent.
		f1, err := s.Fork(t.Context(), storage.ForkRequest{Ref: ref, MessageCount: 4})
		must(t, "Fork", err)
		f2, err := s.Fork(t.Context(), storage.ForkRequest{Ref: storage.Ref{ID: f1.ID}, MessageCount: 2})
		must(t, "Fork of a fork", err)
		if f2.Parent == nil || *f2.Parent != (storage.ForkOrigin{SessionID: f1.ID, MessageCount: 2}) {
			t.Errorf("fork of a fork has parent %+v, want %s/2", f2.Parent, f1.ID)
		}
		// Empty session: a fork of all is an empty session.
		empty := create(t, s, storage.CreateRequest{})
		f3, err := s.Fork(t.Context(), storage.ForkRequest{Ref: storage.Ref{ID: empty.ID}})
		if err != nil || f3.MessageCount != 0 || f3.Parent == nil || f3.Parent.MessageCount != 0 {
			t.Errorf("Fork of an empty session: %+v, %v", f3, err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		s := h.open(t)
		src := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "src", Messages: msgs("m", 3)})
		create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "taken"})
		ref := storage.Ref{Namespace: nsA, ID: src.ID}
		before := takeSnapshot(t, s, ref)
		countBefore := len(listAll(t, s, storage.ListOptions{Namespace: nsA}))
		for _, c := range []struct {
			name string
			req  storage.ForkRequest
			want error
		}{
			{"beyond the session", storage.ForkRequest{Ref: ref, MessageCount: 4}, storage.ErrInvalid},
			{"negative count", storage.ForkRequest{Ref: ref, MessageCount: -1}, storage.ErrInvalid},
			{"taken alias", storage.ForkRequest{Ref: ref, Alias: "taken"}, storage.ErrAliasInUse},
			{"the source's own alias", storage.ForkRequest{Ref: ref, Alias: "src"}, storage.ErrAliasInUse},
			{"missing session", storage.ForkRequest{Ref: storage.Ref{Namespace: nsA, ID: uuid.NewString()}}, storage.ErrNotFound},
			{"id in another namespace", storage.ForkRequest{Ref: storage.Ref{Namespace: nsB, ID: src.ID}}, storage.ErrNotFound},
		} {
			_, err := s.Fork(t.Context(), c.req)
			wantErr(t, "Fork "+c.name, err, c.want)
		}
		checkUnchanged(t, "refused forks", s, ref, before)
		if n := len(listAll(t, s, storage.ListOptions{Namespace: nsA})); n != countBefore {
			t.Errorf("refused forks changed the number of sessions from %d to %d", countBefore, n)
		}
	})
}

func testRewind(t *testing.T, h *harness) {
	t.Run("Keeps", func(t *testing.T) {
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{Alias: "r", Title: "t", Labels: map[string]string{"l": "v"}, Messages: msgs("m", 5)})
		_, all := loadAll(t, s, ref)
		pause()
		got, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{Alias: "r"}, MessageCount: 3, ExpectedRevision: 1})
		must(t, "Rewind to 3", err)
		want := *se
		want.Revision, want.MessageCount, want.UpdatedAt = 2, 3, got.UpdatedAt
		if d := diffSession(&want, got); d != "" {
			t.Errorf("Rewind answered (-want +got):\n%s", d)
		}
		if !got.UpdatedAt.After(se.UpdatedAt) {
			t.Errorf("Rewind did not move updated_at forward")
		}
		_, ms := loadAll(t, s, ref)
		if d := cmpMsgs(all[:3], ms); d != "" {
			t.Errorf("after Rewind to 3 (-want +got):\n%s", d)
		}
		// Rewinding to the current length is a no-op, even with a stale
		// expected revision.
		again, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 3, ExpectedRevision: 1})
		if err != nil || again.Revision != 2 {
			t.Errorf("Rewind to the current length: %+v, %v; want a no-op at revision 2", again, err)
		}
		// Beyond the session is refused.
		before := takeSnapshot(t, s, ref)
		for _, n := range []int64{4, 100, -1} {
			_, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: n})
			wantErr(t, fmt.Sprintf("Rewind to %d of 3", n), err, storage.ErrInvalid)
		}
		checkUnchanged(t, "refused rewinds", s, ref, before)
		// 0 clears.
		got, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: ref})
		if err != nil || got.Revision != 3 || got.MessageCount != 0 {
			t.Errorf("Rewind to 0: %+v, %v; want revision 3, no messages", got, err)
		}
		if _, ms := loadAll(t, s, ref); len(ms) != 0 {
			t.Errorf("Rewind to 0 left %d messages", len(ms))
		}
		_, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{ID: uuid.NewString()}})
		wantErr(t, "Rewind of a missing session", err, storage.ErrNotFound)
		_, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{Namespace: nsA, ID: se.ID}})
		wantErr(t, "Rewind of the id in another namespace", err, storage.ErrNotFound)
	})

	t.Run("ForkSourceUntouched", func(t *testing.T) {
		s := h.open(t)
		_, srcRef := createRef(t, s, storage.CreateRequest{Messages: msgs("m", 4)})
		before := takeSnapshot(t, s, srcRef)
		f, err := s.Fork(t.Context(), storage.ForkRequest{Ref: srcRef})
		must(t, "Fork", err)
		got, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{ID: f.ID}, MessageCount: 1})
		if err != nil || got.MessageCount != 1 {
			t.Fatalf("Rewind of the fork: %+v, %v", got, err)
		}
		checkUnchanged(t, "rewinding a fork", s, srcRef, before)
		got, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: srcRef, MessageCount: 2})
		if err != nil || got.MessageCount != 2 {
			t.Fatalf("Rewind of the source: %+v, %v", got, err)
		}
		if _, ms := loadAll(t, s, storage.Ref{ID: f.ID}); len(ms) != 1 || !proto.Equal(ms[0], before.msgs[0]) {
			t.Errorf("rewinding the source changed the fork: %v", ids(ms))
		}
	})
}

// testExpectedRevision checks that every write carrying a stale expected
// revision fails with ErrConflict and changes nothing, and succeeds with the
// right one.
func testExpectedRevision(t *testing.T, h *harness) {
	s := h.open(t)
	_, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Alias: "cas", Title: "t", Messages: msgs("m", 3)})
	appendMsgs(t, s, ref, msg("x", "bump to revision 2"))
	writes := []struct {
		name string
		do   func(expected uint64) error
	}{
		{"Append", func(e uint64) error {
			return errOf(s.Append(t.Context(), storage.AppendRequest{Ref: ref, ExpectedRevision: e, Messages: []*sessiondv1.Message{msg(fmt.Sprintf("new-%d", e), "new")}}))
		}},
		{"Save", func(e uint64) error {
			return errOf(s.Save(t.Context(), storage.SaveRequest{Ref: ref, ExpectedRevision: e, Title: fmt.Sprintf("saved at %d", e), Messages: msgs("saved", 2)}))
		}},
		{"Save create_if_missing", func(e uint64) error {
			return errOf(s.Save(t.Context(), storage.SaveRequest{Ref: ref, ExpectedRevision: e, Title: fmt.Sprintf("saved again at %d", e), Messages: msgs("saved", 2), CreateIfMissing: true}))
		}},
		{"Update", func(e uint64) error {
			return errOf(s.Update(t.Context(), storage.UpdateRequest{Ref: ref, ExpectedRevision: e, Fields: storage.UpdateTitle | storage.UpdateAlias, Title: fmt.Sprintf("updated at %d", e), Alias: fmt.Sprintf("cas-%d", e)}))
		}},
		{"Rewind", func(e uint64) error {
			return errOf(s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, ExpectedRevision: e, MessageCount: 1}))
		}},
		{"Delete", func(e uint64) error { return s.Delete(t.Context(), ref, e) }},
	}
	for _, w := range writes {
		before := takeSnapshot(t, s, ref)
		cur := before.session.Revision
		for _, stale := range []uint64{cur - 1, cur + 1, 1 << 40} {
			wantErr(t, fmt.Sprintf("%s expecting revision %d at %d", w.name, stale, cur), w.do(stale), storage.ErrConflict)
		}
		checkUnchanged(t, w.name+" with stale revisions", s, ref, before)
		if err := w.do(cur); err != nil {
			t.Fatalf("%s expecting the current revision %d: %v", w.name, cur, err)
		}
		if w.name == "Delete" {
			break
		}
		if got := get(t, s, ref); got.Revision != cur+1 {
			t.Errorf("%s at revision %d left revision %d, want %d", w.name, cur, got.Revision, cur+1)
		}
	}
}

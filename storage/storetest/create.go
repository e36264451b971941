package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func testCreate(t *testing.T, h *harness) {
	t.Run("Basic", func(t *testing.T) {
		s := h.open(t)
		sent := msgs("m", 3)
		sent[1].Id = "" // the store fills it in
		req := storage.CreateRequest{
			Namespace: nsA,
			Title:     "A title",
			Summary:   "A summary",
			Metadata:  map[string]string{"model": "m-1", "k": ""},
			Labels:    map[string]string{"env": "prod"},
			Messages:  sent,
		}
		before := time.Now()
		se := create(t, s, req)
		after := time.Now()
		checkNewID(t, "new session id", se.ID)
		want := &storage.Session{
			ID: se.ID, Namespace: nsA, Title: "A title", Summary: "A summary",
			CreatedAt: se.CreatedAt, UpdatedAt: se.UpdatedAt, Revision: 1, MessageCount: 3,
			Metadata: req.Metadata, Labels: req.Labels,
		}
		if d := diffSession(want, se); d != "" {
			t.Errorf("Create answered (-want +got):\n%s", d)
		}
		checkTimeBetween(t, "created_at", se.CreatedAt, before, after)
		if se.UpdatedAt.Before(se.CreatedAt) {
			t.Errorf("updated_at %v is before created_at %v", se.UpdatedAt, se.CreatedAt)
		}
		ref := storage.Ref{Namespace: nsA, ID: se.ID}
		if d := diffSession(se, get(t, s, ref)); d != "" {
			t.Errorf("Get differs from Create's answer (-create +get):\n%s", d)
		}
		loaded, ms := loadAll(t, s, ref)
		if d := diffSession(se, loaded); d != "" {
			t.Errorf("Load differs from Create's answer (-create +load):\n%s", d)
		}
		checkMessages(t, "Load after Create", ms, sent)
		for _, m := range ms {
			checkTimeBetween(t, "filled-in created_at of message "+m.GetId(), m.GetCreatedAt().AsTime(), before, after)
		}
	})

	t.Run("WithAlias", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{Alias: "my-project"})
		if se.Alias != "my-project" || se.Revision != 1 || se.MessageCount != 0 {
			t.Errorf("Create answered %+v, want alias my-project, revision 1, no messages", se)
		}
		byAlias := get(t, s, storage.Ref{Alias: "my-project"})
		if d := diffSession(se, byAlias); d != "" {
			t.Errorf("Get by alias (-create +get):\n%s", d)
		}
		_, ms := loadAll(t, s, storage.Ref{Alias: "my-project"})
		if len(ms) != 0 {
			t.Errorf("new empty session loads %d messages", len(ms))
		}
	})

	t.Run("NewIDsAreDistinctUUIDv7", func(t *testing.T) {
		s := h.open(t)
		seen := map[string]bool{}
		var prev string
		for range 5 {
			se := create(t, s, storage.CreateRequest{})
			checkNewID(t, "new session id", se.ID)
			if seen[se.ID] {
				t.Errorf("id %s made twice", se.ID)
			}
			seen[se.ID] = true
			// UUIDv7 ids sort by creation time (millisecond prefix).
			if prev != "" && se.ID[:13] < prev[:13] {
				t.Errorf("id %s made after %s sorts before it", se.ID, prev)
			}
			prev = se.ID
		}
	})

	t.Run("ClientChosenID", func(t *testing.T) {
		s := h.open(t)
		id := uuid.New() // any version is fine for a client-chosen id
		upper := strings.ToUpper(id.String())
		req := storage.CreateRequest{
			Namespace: nsA,
			ID:        upper,
			Alias:     "chosen",
			Title:     "t",
			Summary:   "s",
			Metadata:  map[string]string{"a": "b"},
			Labels:    map[string]string{"l": "v"},
			Messages:  []*sessiondv1.Message{msg("m1", "hello"), msg("m2", "world")}, // no created_at
		}
		first := create(t, s, req)
		if first.ID != id.String() {
			t.Errorf("Create with id %s answered id %s, want lowercase canonical %s", upper, first.ID, id)
		}
		for _, ref := range []storage.Ref{{Namespace: nsA, ID: upper}, {Namespace: nsA, ID: id.String()}} {
			if d := diffSession(first, get(t, s, ref)); d != "" {
				t.Errorf("Get(%+v) (-create +get):\n%s", ref, d)
			}
		}

		// An exact retry (a create whose answer was lost) gets the session.
		again, err := s.Create(t.Context(), req)
		must(t, "retried Create", err)
		if d := diffSession(first, again); d != "" {
			t.Errorf("retried Create answered another session (-first +retry):\n%s", d)
		}
		req.ID = id.String()
		again, err = s.Create(t.Context(), req)
		must(t, "retried Create with the lowercase id", err)
		if d := diffSession(first, again); d != "" {
			t.Errorf("retried Create answered another session (-first +retry):\n%s", d)
		}
		before := takeSnapshot(t, s, storage.Ref{Namespace: nsA, ID: id.String()})

		// Any difference makes it a different request.
		diffs := map[string]func(r *storage.CreateRequest){
			"title":    func(r *storage.CreateRequest) { r.Title = "other" },
			"summary":  func(r *storage.CreateRequest) { r.Summary = "other" },
			"alias":    func(r *storage.CreateRequest) { r.Alias = "other-alias" },
			"no alias": func(r *storage.CreateRequest) { r.Alias = "" },
			"metadata": func(r *storage.CreateRequest) { r.Metadata = map[string]string{"a": "c"} },
			"labels":   func(r *storage.CreateRequest) { r.Labels = nil },
			"messages": func(r *storage.CreateRequest) { r.Messages = r.Messages[:1] },
			"content": func(r *storage.CreateRequest) {
				r.Messages = []*sessiondv1.Message{msg("m1", "hello"), msg("m2", "other")}
			},
			"parent": func(r *storage.CreateRequest) {
				r.Parent = &storage.ForkOrigin{SessionID: uuid.NewString(), MessageCount: 1}
			},
			"namespace": func(r *storage.CreateRequest) { r.Namespace = nsB },
			"default namespace": func(r *storage.CreateRequest) {
				r.Namespace = nsDefault
			},
		}
		for name, change := range diffs {
			r := req
			change(&r)
			_, err := s.Create(t.Context(), r)
			wantErr(t, "Create with a used id and another "+name, err, storage.ErrAlreadyExists)
		}
		checkUnchanged(t, "refused creates", s, storage.Ref{Namespace: nsA, ID: id.String()}, before)
		for _, ns := range []string{nsDefault, nsB} {
			_, err := s.Get(t.Context(), storage.Ref{Namespace: ns, ID: id.String()})
			wantErr(t, "Get of the id in namespace "+ns, err, storage.ErrNotFound)
		}

		// Once the session has changed, a create is no longer a retry.
		appendMsgs(t, s, storage.Ref{Namespace: nsA, ID: id.String()}, msg("m3", "more"))
		_, err = s.Create(t.Context(), req)
		wantErr(t, "Create retried after the session changed", err, storage.ErrAlreadyExists)
	})

	t.Run("BadClientID", func(t *testing.T) {
		s := h.open(t)
		for _, id := range []string{"not-a-uuid", "0190b5a47f2e7c3d8a1b2c3d4e5f6a7b", "{0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b}", "0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7", "../x"} {
			_, err := s.Create(t.Context(), storage.CreateRequest{ID: id})
			wantErr(t, "Create with id "+id, err, storage.ErrInvalid)
		}
		if n := len(listAll(t, s, storage.ListOptions{})); n != 0 {
			t.Errorf("refused creates left %d sessions", n)
		}
	})

	t.Run("Import", func(t *testing.T) {
		s := h.open(t)
		// Microseconds, so that a backend keeping microseconds keeps it exactly.
		created := time.Date(2023, 5, 1, 12, 34, 56, 123456000, time.UTC)
		parent := &storage.ForkOrigin{SessionID: uuid.NewString(), MessageCount: 7}
		sent := []*sessiondv1.Message{msg("m1", "old")}
		sent[0].CreatedAt = timestamppb.New(created.Add(time.Second))
		se := create(t, s, storage.CreateRequest{CreatedAt: created, Parent: parent, Messages: sent, Title: "imported"})
		if !se.CreatedAt.Equal(created) {
			t.Errorf("imported created_at = %v, want %v", se.CreatedAt, created)
		}
		got := get(t, s, storage.Ref{ID: se.ID})
		if !got.CreatedAt.Equal(created) {
			t.Errorf("Get: imported created_at = %v, want %v", got.CreatedAt, created)
		}
		if got.Parent == nil || *got.Parent != *parent {
			t.Errorf("Get: imported parent = %+v, want %+v", got.Parent, parent)
		}
		if got.Revision != 1 {
			t.Errorf("imported session has revision %d, want 1", got.Revision)
		}
		_, ms := loadAll(t, s, storage.Ref{ID: se.ID})
		checkMessages(t, "imported messages", ms, sent)
	})

	t.Run("StartRevision", func(t *testing.T) {
		// An import keeps the session's revision: the new session starts
		// there, every change goes on from it, a retried create is still
		// recognised, and it survives a reopen.
		s, addr := h.openData(t)
		id := uuid.NewString()
		req := storage.CreateRequest{Namespace: nsA, ID: id, Alias: "imported-rev", Revision: 41, Messages: msgs("m", 2)}
		se := create(t, s, req)
		if se.Revision != 41 {
			t.Fatalf("Create with revision 41 answered revision %d", se.Revision)
		}
		if again := create(t, s, req); again.ID != id || again.Revision != 41 {
			t.Errorf("retried create answered %+v, want the session at revision 41", again)
		}
		ref := storage.Ref{Namespace: nsA, ID: id}
		if res := appendMsgs(t, s, ref, msg("m9", "later")); res.Revision != 42 {
			t.Errorf("append after an import at 41: revision %d, want 42", res.Revision)
		}
		if _, err := s.Create(t.Context(), req); !errors.Is(err, storage.ErrAlreadyExists) {
			t.Errorf("create again after a change: %v, want ErrAlreadyExists", err)
		}
		s2 := h.reopen(t, "after reopen", s, addr)
		if got := get(t, s2, ref); got.Revision != 42 || got.MessageCount != 3 {
			t.Errorf("after reopen: revision %d with %d messages, want 42 with 3", got.Revision, got.MessageCount)
		}
		if zero := create(t, s2, storage.CreateRequest{Namespace: nsA}); zero.Revision != 1 {
			t.Errorf("Create without a revision answered revision %d, want 1", zero.Revision)
		}
		_, err := s2.Create(t.Context(), storage.CreateRequest{Namespace: nsA, Revision: storage.MaxStartRevision + 1})
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), "revision") {
			t.Errorf("Create with revision over the bound: %v, want ErrInvalid naming revision", err)
		}
	})

	t.Run("AliasInUse", func(t *testing.T) {
		s := h.open(t)
		first := create(t, s, storage.CreateRequest{Alias: "taken", Title: "first"})
		_, err := s.Create(t.Context(), storage.CreateRequest{Alias: "taken", Title: "second"})
		wantErr(t, "Create with a taken alias", err, storage.ErrAliasInUse)
		// Also with a client-chosen id: the alias is checked, and nothing is made.
		id := uuid.NewString()
		_, err = s.Create(t.Context(), storage.CreateRequest{ID: id, Alias: "taken"})
		wantErr(t, "Create with a new id and a taken alias", err, storage.ErrAliasInUse)
		_, err = s.Get(t.Context(), storage.Ref{ID: id})
		wantErr(t, "Get of the refused create's id", err, storage.ErrNotFound)
		if list := listAll(t, s, storage.ListOptions{}); len(list) != 1 || list[0].ID != first.ID {
			t.Errorf("after refused creates the namespace lists %v, want only %s", sessionIDs(list), first.ID)
		}
		// Aliases are per namespace.
		other := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "taken"})
		if got := get(t, s, storage.Ref{Namespace: nsA, Alias: "taken"}); got.ID != other.ID {
			t.Errorf("alias in %q resolves to %s, want %s", nsA, got.ID, other.ID)
		}
		if got := get(t, s, storage.Ref{Alias: "taken"}); got.ID != first.ID {
			t.Errorf("alias in the default namespace resolves to %s, want %s", got.ID, first.ID)
		}
	})

	t.Run("InvalidMessages", func(t *testing.T) {
		s := h.open(t)
		cases := map[string][]*sessiondv1.Message{
			"unspecified role": {{Id: "a", Content: "x"}},
			"unknown role":     {{Id: "a", Role: sessiondv1.Role(99)}},
			"repeated id":      {msg("a", "x"), msg("a", "y")},
			"nil message":      {nil},
			"control char id":  {msg("a\nb", "x")},
			"long id":          {msg(strings.Repeat("i", storage.MaxMessageIDBytes+1), "x")},
			"bad tool call id": {{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "", Name: "f"}}}},
		}
		for name, ms := range cases {
			_, err := s.Create(t.Context(), storage.CreateRequest{Alias: "x", Messages: ms})
			wantErr(t, "Create with "+name, err, storage.ErrInvalid)
		}
		if n := len(listAll(t, s, storage.ListOptions{})); n != 0 {
			t.Errorf("refused creates left %d sessions", n)
		}
		// The alias was not taken by any of them.
		create(t, s, storage.CreateRequest{Alias: "x"})
	})
}

func testGet(t *testing.T, h *harness) {
	s := h.open(t)
	a := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "same", Title: "in a"})
	b := create(t, s, storage.CreateRequest{Namespace: nsB, Alias: "same", Title: "in b"})
	d := create(t, s, storage.CreateRequest{Alias: "same", Title: "in default"})
	for _, c := range []struct {
		ref  storage.Ref
		want *storage.Session
	}{
		{storage.Ref{Namespace: nsA, ID: a.ID}, a},
		{storage.Ref{Namespace: nsA, Alias: "same"}, a},
		{storage.Ref{Namespace: nsB, Alias: "same"}, b},
		{storage.Ref{Alias: "same"}, d},
		{storage.Ref{ID: d.ID}, d},
		{storage.Ref{ID: d.ID, Alias: "ignored-when-id-is-set"}, d},
	} {
		got, err := s.Get(t.Context(), c.ref)
		if err != nil {
			t.Errorf("Get(%+v): %v", c.ref, err)
			continue
		}
		if diff := diffSession(c.want, got); diff != "" {
			t.Errorf("Get(%+v) (-want +got):\n%s", c.ref, diff)
		}
	}
	for _, ref := range []storage.Ref{
		{Namespace: nsB, ID: a.ID},             // id in another namespace
		{ID: a.ID},                             // id in another namespace (default)
		{Namespace: nsA, ID: d.ID},             // id in another namespace
		{Namespace: nsA, ID: uuid.NewString()}, // no such id
		{Namespace: nsA, Alias: "nope"},        // no such alias
		{Namespace: "ns-c", Alias: "same"},     // empty namespace
	} {
		_, err := s.Get(t.Context(), ref)
		wantErr(t, "Get("+refString(ref)+")", err, storage.ErrNotFound)
		_, _, err = s.Load(t.Context(), ref, storage.LoadOptions{})
		wantErr(t, "Load("+refString(ref)+")", err, storage.ErrNotFound)
	}
	for _, ref := range []storage.Ref{{}, {Namespace: nsA}, {ID: "nope"}, {Alias: "a/b"}, {Namespace: "a/b", ID: a.ID}} {
		_, err := s.Get(t.Context(), ref)
		wantErr(t, "Get("+refString(ref)+")", err, storage.ErrInvalid)
	}
}

func refString(r storage.Ref) string {
	return "ns=" + r.Namespace + " id=" + r.ID + " alias=" + r.Alias
}

func testLoad(t *testing.T, h *harness) {
	s := h.open(t)
	all := msgs("m", 10)
	se, ref := createRef(t, s, storage.CreateRequest{Alias: "load", Messages: all})
	_, stored := loadAll(t, s, ref)
	checkMessages(t, "Load all", stored, all)

	for _, c := range []struct {
		name     string
		opts     storage.LoadOptions
		from, to int
	}{
		{"all", storage.LoadOptions{}, 0, 10},
		{"offset", storage.LoadOptions{Offset: 3}, 3, 10},
		{"limit", storage.LoadOptions{Limit: 4}, 0, 4},
		{"offset and limit", storage.LoadOptions{Offset: 2, Limit: 3}, 2, 5},
		{"limit past the end", storage.LoadOptions{Offset: 8, Limit: 5}, 8, 10},
		{"offset at the end", storage.LoadOptions{Offset: 10}, 10, 10},
		// An offset beyond the session is an empty answer, not an error:
		// the session may have been rewound since the caller counted.
		{"offset beyond the end", storage.LoadOptions{Offset: 11, Limit: 2}, 10, 10},
		{"offset far beyond the end", storage.LoadOptions{Offset: 1 << 40}, 10, 10},
		{"tail", storage.LoadOptions{Tail: true, Limit: 3}, 7, 10},
		{"tail of all", storage.LoadOptions{Tail: true, Limit: 10}, 0, 10},
		{"tail beyond", storage.LoadOptions{Tail: true, Limit: 25}, 0, 10},
		// Limit 0 means all, with Tail too.
		{"tail without limit", storage.LoadOptions{Tail: true}, 0, 10},
		// Client numbers at their extremes: no overflow, no panic.
		{"offset 1, limit max", storage.LoadOptions{Offset: 1, Limit: math.MaxInt64}, 1, 10},
		{"limit max", storage.LoadOptions{Limit: math.MaxInt64}, 0, 10},
		{"offset and limit max", storage.LoadOptions{Offset: math.MaxInt64, Limit: math.MaxInt64}, 10, 10},
		{"tail max", storage.LoadOptions{Tail: true, Limit: math.MaxInt64}, 0, 10},
	} {
		got, ms, err := s.Load(t.Context(), ref, c.opts)
		if err != nil {
			t.Errorf("Load %s (%+v): %v", c.name, c.opts, err)
			continue
		}
		if got.MessageCount != 10 || got.ID != se.ID || got.Revision != 1 {
			t.Errorf("Load %s: session %+v, want the whole session's metadata (10 messages, revision 1)", c.name, got)
		}
		if diff := cmpMsgs(stored[c.from:c.to], ms); diff != "" {
			t.Errorf("Load %s (%+v): messages (-want +got):\n%s", c.name, c.opts, diff)
		}
		// LoadStream hands out the same answer piece by piece.
		var streamed []*sessiondv1.Message
		var meta *storage.Session
		err = s.LoadStream(t.Context(), ref, c.opts, func(m *storage.Session) error { meta = m; return nil },
			func(m *sessiondv1.Message) error { streamed = append(streamed, m); return nil })
		if err != nil || meta == nil || meta.MessageCount != 10 {
			t.Errorf("LoadStream %s: metadata %+v, %v", c.name, meta, err)
		}
		if diff := cmpMsgs(stored[c.from:c.to], streamed); diff != "" {
			t.Errorf("LoadStream %s (%+v): messages (-want +got):\n%s", c.name, c.opts, diff)
		}
	}
	for _, c := range []struct {
		name string
		opts storage.LoadOptions
	}{
		{"negative offset", storage.LoadOptions{Offset: -1}},
		{"negative limit", storage.LoadOptions{Limit: -1}},
		{"tail with offset", storage.LoadOptions{Tail: true, Offset: 1, Limit: 2}},
	} {
		_, _, err := s.Load(t.Context(), ref, c.opts)
		wantErr(t, "Load "+c.name, err, storage.ErrInvalid)
	}

	// An empty session answers every window with no messages.
	empty := create(t, s, storage.CreateRequest{})
	for _, opts := range []storage.LoadOptions{{}, {Offset: 3}, {Tail: true, Limit: 2}} {
		_, ms, err := s.Load(t.Context(), storage.Ref{ID: empty.ID}, opts)
		if err != nil || len(ms) != 0 {
			t.Errorf("Load(empty, %+v) = %d messages, %v; want none, nil", opts, len(ms), err)
		}
	}
}

func testNames(t *testing.T, h *harness) {
	s := h.open(t)
	target := create(t, s, storage.CreateRequest{Alias: "target", Messages: msgs("m", 2)})
	badAliases := []string{
		"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b", // shaped like a UUID
		"0190B5A4-7F2E-7C3D-8A1B-2C3D4E5F6A7B",
		"0190b5a47f2e7c3d8a1b2c3d4e5f6a7b", // uuid.Parse accepts this form too
		".", "..", "a/b", "/", "a\\b", "a\x00b", "a b", "é", "a:b",
		strings.Repeat("a", storage.MaxNameBytes+1),
	}
	for _, bad := range badAliases {
		_, err := s.Create(t.Context(), storage.CreateRequest{Alias: bad})
		wantErr(t, "Create alias "+strqq(bad), err, storage.ErrInvalid)
		_, err = s.Get(t.Context(), storage.Ref{Alias: bad})
		wantErr(t, "Get alias "+strqq(bad), err, storage.ErrInvalid)
		_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: target.ID}, Fields: storage.UpdateAlias, Alias: bad})
		wantErr(t, "Update alias "+strqq(bad), err, storage.ErrInvalid)
		_, err = s.Fork(t.Context(), storage.ForkRequest{Ref: storage.Ref{ID: target.ID}, Alias: bad})
		wantErr(t, "Fork alias "+strqq(bad), err, storage.ErrInvalid)
		_, err = s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Alias: bad}, CreateIfMissing: true})
		wantErr(t, "Save create_if_missing alias "+strqq(bad), err, storage.ErrInvalid)
	}
	badNamespaces := []string{".", "..", "a/b", "a\x00b", "a b", strings.Repeat("n", storage.MaxNameBytes+1)}
	for _, bad := range badNamespaces {
		_, err := s.Create(t.Context(), storage.CreateRequest{Namespace: bad})
		wantErr(t, "Create namespace "+strqq(bad), err, storage.ErrInvalid)
		_, err = s.Get(t.Context(), storage.Ref{Namespace: bad, ID: target.ID})
		wantErr(t, "Get namespace "+strqq(bad), err, storage.ErrInvalid)
		err = s.List(t.Context(), storage.ListOptions{Namespace: bad}, func(*storage.Session) error { return nil })
		wantErr(t, "List namespace "+strqq(bad), err, storage.ErrInvalid)
		err = s.Search(t.Context(), storage.SearchOptions{Namespace: bad, Query: "x"}, func(storage.SearchHit) error { return nil })
		wantErr(t, "Search namespace "+strqq(bad), err, storage.ErrInvalid)
	}
	// The longest names are fine, and so is a UUID-shaped namespace.
	long := strings.Repeat("a", storage.MaxNameBytes)
	se := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: long})
	if got := get(t, s, storage.Ref{Namespace: nsA, Alias: long}); got.ID != se.ID {
		t.Errorf("128-byte alias resolves to %s, want %s", got.ID, se.ID)
	}
	for _, good := range []string{"a", "A.b_c-D", "..a", "a..", "-", "_"} {
		_, err := s.Create(t.Context(), storage.CreateRequest{Namespace: nsB, Alias: good})
		if err != nil {
			t.Errorf("Create alias %q: %v", good, err)
		}
	}
	// Unspecified roles are refused by every write that carries messages.
	bad := []*sessiondv1.Message{{Id: "x", Content: "no role"}}
	before := takeSnapshot(t, s, storage.Ref{ID: target.ID})
	_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: target.ID}, Messages: bad})
	wantErr(t, "Append with an unspecified role", err, storage.ErrInvalid)
	_, err = s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{ID: target.ID}, Messages: bad})
	wantErr(t, "Save with an unspecified role", err, storage.ErrInvalid)
	checkUnchanged(t, "refused writes", s, storage.Ref{ID: target.ID}, before)
}

func strqq(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", s[:20], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// noPanic runs call and turns a panic into an error, so that a backend that
// panics on bad input fails one test instead of killing the test binary.
func noPanic(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return call()
}

// testInvalidUTF8 checks that text that is not valid UTF-8 (which no
// protobuf string may hold, so it can neither be stored as protobuf nor sent
// to a client) is refused with ErrInvalid by every write, and changes nothing.
func testInvalidUTF8(t *testing.T, h *harness) {
	const bad = "bad \xff text"
	badMsg := []*sessiondv1.Message{{Id: "x", Role: sessiondv1.Role_ROLE_USER, Content: bad}}
	badArgs := []*sessiondv1.Message{{Id: "y", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "c", Arguments: bad}}}}
	type call func(ctx context.Context, s *storage.Store, ref storage.Ref) error
	for _, c := range []struct {
		name string
		call call
	}{
		{"CreateTitle", func(ctx context.Context, s *storage.Store, _ storage.Ref) error {
			return errOf(s.Create(ctx, storage.CreateRequest{Title: bad}))
		}},
		{"CreateSummary", func(ctx context.Context, s *storage.Store, _ storage.Ref) error {
			return errOf(s.Create(ctx, storage.CreateRequest{Summary: bad}))
		}},
		{"CreateMetadata", func(ctx context.Context, s *storage.Store, _ storage.Ref) error {
			return errOf(s.Create(ctx, storage.CreateRequest{Metadata: map[string]string{"k": bad}}))
		}},
		{"CreateLabels", func(ctx context.Context, s *storage.Store, _ storage.Ref) error {
			return errOf(s.Create(ctx, storage.CreateRequest{Labels: map[string]string{bad: "v"}}))
		}},
		{"CreateMessage", func(ctx context.Context, s *storage.Store, _ storage.Ref) error {
			return errOf(s.Create(ctx, storage.CreateRequest{Messages: badMsg}))
		}},
		{"AppendMessage", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: badMsg}))
		}},
		{"AppendArguments", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: badArgs}))
		}},
		{"SaveTitle", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Save(ctx, storage.SaveRequest{Ref: ref, Title: bad}))
		}},
		{"SaveMetadata", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Save(ctx, storage.SaveRequest{Ref: ref, Metadata: map[string]string{bad: ""}}))
		}},
		{"SaveMessage", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: badMsg}))
		}},
		{"UpdateTitle", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle, Title: bad}))
		}},
		{"UpdateSummary", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateSummary, Summary: bad}))
		}},
		{"UpdateLabels", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateLabels, Labels: map[string]string{"k": bad}}))
		}},
		{"ForkTitle", func(ctx context.Context, s *storage.Store, ref storage.Ref) error {
			return errOf(s.Fork(ctx, storage.ForkRequest{Ref: ref, Title: bad}))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := h.open(t)
			_, ref := createRef(t, s, storage.CreateRequest{Alias: "utf8", Title: "ok", Messages: msgs("m", 1)})
			before := takeSnapshot(t, s, ref)
			err := noPanic(func() error { return c.call(t.Context(), s, ref) })
			if err != nil && strings.HasPrefix(err.Error(), "panicked: ") {
				// A store that panicked may hold locks or be half-written:
				// nothing after this would be meaningful.
				t.Fatalf("invalid UTF-8 %v; want ErrInvalid", err)
			}
			wantErr(t, "invalid UTF-8", err, storage.ErrInvalid)
			checkUnchanged(t, "a write with invalid UTF-8", s, ref, before)
			if n := len(listAll(t, s, storage.ListOptions{})); n != 1 {
				t.Errorf("a refused write left %d sessions, want 1", n)
			}
		})
	}
}

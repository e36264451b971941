package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func testList(t *testing.T, h *harness) {
	t.Run("OrderAndWindows", func(t *testing.T) {
		s := h.open(t)
		// s0 is the oldest; each create gets a later updated_at.
		var made []*storage.Session
		for i := range 5 {
			made = append(made, create(t, s, storage.CreateRequest{Alias: fmt.Sprintf("s%d", i)}))
			pause()
		}
		create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "s9"}) // not in the default namespace
		newestFirst := func(ss ...*storage.Session) []string {
			out := sessionIDs(ss)
			slices.Reverse(out)
			return out
		}
		list := listAll(t, s, storage.ListOptions{})
		if d := cmp.Diff(newestFirst(made...), sessionIDs(list)); d != "" {
			t.Fatalf("List order (-want +got):\n%s", d)
		}
		for i, se := range list {
			if d := diffSession(made[len(made)-1-i], se); d != "" {
				t.Errorf("listed session differs from its Create answer (-create +list):\n%s", d)
			}
		}

		// A write moves a session to the front.
		appendMsgs(t, s, storage.Ref{ID: made[1].ID}, msg("m", "x"))
		made = append(append(made[:1:1], made[2:]...), get(t, s, storage.Ref{ID: made[1].ID}))
		// made is now oldest..newest again: s0 s2 s3 s4 s1.
		list = listAll(t, s, storage.ListOptions{})
		if d := cmp.Diff(newestFirst(made...), sessionIDs(list)); d != "" {
			t.Fatalf("List order after an append to s1 (-want +got):\n%s", d)
		}
		ts := func(i int) time.Time { return made[i].UpdatedAt }
		for _, c := range []struct {
			name string
			opts storage.ListOptions
			want []string
		}{
			{"limit", storage.ListOptions{Limit: 2}, newestFirst(made[3:]...)},
			{"limit beyond", storage.ListOptions{Limit: 50}, newestFirst(made...)},
			{"updated after (exclusive)", storage.ListOptions{UpdatedAfter: ts(2)}, newestFirst(made[3:]...)},
			{"updated before (exclusive)", storage.ListOptions{UpdatedBefore: ts(2)}, newestFirst(made[:2]...)},
			{"updated between", storage.ListOptions{UpdatedAfter: ts(0), UpdatedBefore: ts(4)}, newestFirst(made[1:4]...)},
			{"updated between, limited", storage.ListOptions{UpdatedAfter: ts(0), UpdatedBefore: ts(4), Limit: 1}, newestFirst(made[3:4]...)},
			{"nothing between", storage.ListOptions{UpdatedAfter: ts(2), UpdatedBefore: ts(3)}, nil},
			{"after a cursor", storage.ListOptions{After: &storage.Cursor{UpdatedAt: ts(3), ID: made[3].ID}}, newestFirst(made[:3]...)},
			{"after the last", storage.ListOptions{After: &storage.Cursor{UpdatedAt: ts(0), ID: made[0].ID}}, nil},
			// Ties on updated_at are broken by id: a cursor at the same time
			// but a smaller id comes before the session, a bigger one after.
			{"cursor before in the tie order", storage.ListOptions{After: &storage.Cursor{UpdatedAt: ts(3), ID: ""}}, newestFirst(made[:4]...)},
			{"cursor after in the tie order", storage.ListOptions{After: &storage.Cursor{UpdatedAt: ts(3), ID: "ffffffff-ffff-ffff-ffff-ffffffffffff"}}, newestFirst(made[:3]...)},
			{"cursor and limit", storage.ListOptions{After: &storage.Cursor{UpdatedAt: ts(4), ID: made[4].ID}, Limit: 2}, newestFirst(made[2:4]...)},
			{"namespace", storage.ListOptions{Namespace: nsB}, nil},
		} {
			got := sessionIDs(listAll(t, s, c.opts))
			if d := cmp.Diff(c.want, got, cmpEmpty); d != "" {
				t.Errorf("List %s (-want +got):\n%s", c.name, d)
			}
		}

		// Paging with a cursor taken from each page's last session walks
		// the whole listing once.
		var paged []string
		var after *storage.Cursor
		for range 10 {
			page := listAll(t, s, storage.ListOptions{Limit: 2, After: after})
			if len(page) == 0 {
				break
			}
			paged = append(paged, sessionIDs(page)...)
			last := page[len(page)-1]
			after = &storage.Cursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
		}
		if d := cmp.Diff(newestFirst(made...), paged); d != "" {
			t.Errorf("paged listing (-want +got):\n%s", d)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		s := h.open(t)
		mk := func(ns, alias string, labels map[string]string) string {
			return create(t, s, storage.CreateRequest{Namespace: ns, Alias: alias, Labels: labels}).ID
		}
		prodX := mk(nsA, "proj-one", map[string]string{"env": "prod", "team": "x"})
		prod := mk(nsA, "proj-two", map[string]string{"env": "prod"})
		devX := mk(nsA, "other", map[string]string{"env": "dev", "team": "x"})
		plain := mk(nsA, "", nil)
		bProd := mk(nsB, "proj-one", map[string]string{"env": "prod", "team": "x"})
		dflt := mk(nsDefault, "proj-one", nil)
		for _, c := range []struct {
			name string
			opts storage.ListOptions
			want []string
		}{
			{"namespace a", storage.ListOptions{Namespace: nsA}, sortedIDs(prodX, prod, devX, plain)},
			{"namespace b", storage.ListOptions{Namespace: nsB}, sortedIDs(bProd)},
			{"default namespace", storage.ListOptions{}, sortedIDs(dflt)},
			{"alias prefix", storage.ListOptions{Namespace: nsA, AliasPrefix: "proj-"}, sortedIDs(prodX, prod)},
			{"whole alias as prefix", storage.ListOptions{Namespace: nsA, AliasPrefix: "proj-one"}, sortedIDs(prodX)},
			{"alias prefix, no match", storage.ListOptions{Namespace: nsA, AliasPrefix: "zzz"}, nil},
			{"alias prefix is case-sensitive", storage.ListOptions{Namespace: nsA, AliasPrefix: "PROJ"}, nil},
			{"one label", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": "prod"}}, sortedIDs(prodX, prod)},
			{"two labels", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": "prod", "team": "x"}}, sortedIDs(prodX)},
			{"other label", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"team": "x"}}, sortedIDs(prodX, devX)},
			{"label value differs", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": "staging"}}, nil},
			{"label and missing label", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": "prod", "zone": "1"}}, nil},
			{"empty label value matches only empty", storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": ""}}, nil},
			{"labels and prefix", storage.ListOptions{Namespace: nsA, AliasPrefix: "proj-t", Labels: map[string]string{"env": "prod"}}, sortedIDs(prod)},
		} {
			got := sessionIDs(listAll(t, s, c.opts))
			slices.Sort(got)
			if d := cmp.Diff(c.want, got, cmpEmpty); d != "" {
				t.Errorf("List %s (-want +got):\n%s", c.name, d)
			}
		}
		// Relabelling moves a session in and out of a filter.
		_, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: nsA, ID: plain}, Fields: storage.UpdateLabels, Labels: map[string]string{"env": "prod"}})
		must(t, "Update labels", err)
		got := sessionIDs(listAll(t, s, storage.ListOptions{Namespace: nsA, Labels: map[string]string{"env": "prod"}}))
		slices.Sort(got)
		if d := cmp.Diff(sortedIDs(prodX, prod, plain), got); d != "" {
			t.Errorf("List env=prod after relabelling (-want +got):\n%s", d)
		}
	})

	t.Run("YieldError", func(t *testing.T) {
		s := h.open(t)
		for range 3 {
			create(t, s, storage.CreateRequest{})
		}
		stop := errors.New("stop here")
		calls := 0
		err := s.List(t.Context(), storage.ListOptions{}, func(*storage.Session) error {
			calls++
			return stop
		})
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("List with a failing yield: %v after %d calls; want its error after 1 call", err, calls)
		}
		// yield runs without store locks: it may call the store.
		// Each session is yielded once, even though every write moves it
		// to the front of the order.
		yielded := map[string]int{}
		err = s.List(t.Context(), storage.ListOptions{}, func(se *storage.Session) error {
			yielded[se.ID]++
			if yielded[se.ID] > 1 {
				return fmt.Errorf("session %s yielded twice", se.ID)
			}
			_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("from-yield", 1)})
			return err
		})
		must(t, "List whose yield writes", err)
		if len(yielded) != 3 {
			t.Errorf("List whose yield writes yielded %d sessions, want 3", len(yielded))
		}
	})
}

// cmpEmpty treats nil and empty slices as equal.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })

func testSearch(t *testing.T, h *harness) {
	s := h.open(t)
	byTitle := create(t, s, storage.CreateRequest{Title: "Alpha Project"})
	pause()
	byAlias := create(t, s, storage.CreateRequest{Alias: "beta-notes"})
	pause()
	bySummary := create(t, s, storage.CreateRequest{Summary: "the GAMMA summary"})
	pause()
	byMessages := create(t, s, storage.CreateRequest{Title: "messages", Messages: []*sessiondv1.Message{
		msg("m0", "hello DELTA world"),
		{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Parts: []*sessiondv1.ContentPart{
			{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "image/png", Data: []byte{1, 2}}}},
			{Kind: &sessiondv1.ContentPart_Text{Text: "some Epsilon text"}},
		}},
		{Id: "m2", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{
			{Id: "call-1", Name: "lookup", Arguments: `{"q": "zeta!"}`},
		}},
		msg("m3", "nothing to see"),
	}})
	pause()
	// Several hits in one session: the metadata hit first, then messages in order.
	multi := create(t, s, storage.CreateRequest{Title: "common title", Messages: []*sessiondv1.Message{
		msg("c0", "common one"), msg("c1", "not here"), msg("c2", "COMMON two"),
	}})
	pause()
	create(t, s, storage.CreateRequest{Namespace: nsA, Title: "alpha elsewhere", Messages: []*sessiondv1.Message{msg("x", "delta elsewhere")}})

	type hit struct {
		ID    string
		Index int64
	}
	for _, c := range []struct {
		query string
		want  []hit
	}{
		{"alpha", []hit{{byTitle.ID, -1}}},
		{"BETA", []hit{{byAlias.ID, -1}}},
		{"gamma summary", []hit{{bySummary.ID, -1}}},
		{"delta", []hit{{byMessages.ID, 0}}},
		{"EPSILON", []hit{{byMessages.ID, 1}}},
		{"Zeta!", []hit{{byMessages.ID, 2}}},
		{"lookup", nil}, // tool names are not searched
		{"image/png", nil},
		{"no such words", nil},
		{"common", []hit{{multi.ID, -1}, {multi.ID, 0}, {multi.ID, 2}}},
	} {
		hits := searchAll(t, s, storage.SearchOptions{Query: c.query})
		var got []hit
		for _, ht := range hits {
			got = append(got, hit{ht.Session.ID, ht.MessageIndex})
			if !containsFold(ht.Snippet, c.query) {
				t.Errorf("Search %q: snippet %q does not show the match", c.query, ht.Snippet)
			}
			if ht.Session.Namespace != nsDefault {
				t.Errorf("Search %q in the default namespace found a session of %q", c.query, ht.Session.Namespace)
			}
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("Search %q (-want +got):\n%s", c.query, d)
		}
	}
	// Hits come session by session in list order (newest-updated first).
	appendMsgs(t, s, storage.Ref{ID: byTitle.ID}, msg("late", "a late common word"))
	hits := searchAll(t, s, storage.SearchOptions{Query: "common"})
	var got []hit
	for _, ht := range hits {
		got = append(got, hit{ht.Session.ID, ht.MessageIndex})
	}
	want := []hit{{byTitle.ID, 0}, {multi.ID, -1}, {multi.ID, 0}, {multi.ID, 2}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Search common after an append (-want +got):\n%s", d)
	}
	if len(hits) > 0 {
		if d := diffSession(get(t, s, storage.Ref{ID: byTitle.ID}), hits[0].Session); d != "" {
			t.Errorf("a hit's session (-get +hit):\n%s", d)
		}
	}
	// Limit counts hits.
	if hits := searchAll(t, s, storage.SearchOptions{Query: "common", Limit: 2}); len(hits) != 2 {
		t.Errorf("Search with limit 2 gave %d hits", len(hits))
	}
	// Namespaces are separate.
	if hits := searchAll(t, s, storage.SearchOptions{Namespace: nsA, Query: "ALPHA"}); len(hits) != 1 || hits[0].Session.Namespace != nsA {
		t.Errorf("Search in %q: %+v; want its one session", nsA, hits)
	}
	if hits := searchAll(t, s, storage.SearchOptions{Namespace: nsB, Query: "alpha"}); len(hits) != 0 {
		t.Errorf("Search in an empty namespace found %d hits", len(hits))
	}
	err := s.Search(t.Context(), storage.SearchOptions{}, func(storage.SearchHit) error { return nil })
	wantErr(t, "Search with an empty query", err, storage.ErrInvalid)
	stop := errors.New("stop")
	calls := 0
	err = s.Search(t.Context(), storage.SearchOptions{Query: "common"}, func(storage.SearchHit) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Search with a failing yield: %v after %d calls; want its error after 1 call", err, calls)
	}
}

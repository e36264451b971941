package storetest

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sessiond/sessiond/storage"
)

// textEncoder encodes every field of a listed session as text, so that an
// encoding kept from before a write differs from the session's now.
type textEncoder struct{ calls atomic.Int64 }

func (e *textEncoder) EncodeListed(s *storage.Session) ([]byte, error) {
	e.calls.Add(1)
	// fmt prints maps sorted by key, so equal sessions encode equally.
	return fmt.Appendf(nil, "%s|%s|%s|%s|%s|%d|%d|%d|%d|%v|%v|%+v|%+v|%v", s.ID, s.Namespace, s.Alias, s.Title, s.Summary,
		s.CreatedAt.UnixNano(), s.UpdatedAt.UnixNano(), s.Revision, s.MessageCount, s.Metadata, s.Labels, s.Parent, s.Tally, s.ExpireAfter), nil
}

// checkListEncoded checks that ListEncoded yields, for opts, exactly the
// encodings of what List yields now: a backend that keeps encodings
// (storage.EncodedLister) must never hand out one made before a write.
func checkListEncoded(t *testing.T, what string, s storage.Store, enc *textEncoder, opts storage.ListOptions) {
	t.Helper()
	var want, got []string
	for _, se := range listAll(t, s, opts) {
		b, _ := (&textEncoder{}).EncodeListed(se)
		want = append(want, string(b))
	}
	err := s.ListEncoded(t.Context(), opts, enc, func(b []byte) error {
		got = append(got, string(b))
		return nil
	})
	if err != nil {
		t.Fatalf("%s: ListEncoded(%+v): %v", what, opts, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s: ListEncoded(%+v) differs from List (-list +encoded):\n%s", what, opts, d)
	}
}

func testListEncoded(t *testing.T, h *harness) {
	t.Run("FreshAfterEveryWrite", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		enc, warmed := &textEncoder{}, &textEncoder{}
		check := func(what string) {
			t.Helper()
			// Twice: the second listing may use what the first kept.
			for range 2 {
				for _, ns := range []string{"", nsA} {
					checkListEncoded(t, what, s, enc, storage.ListOptions{Namespace: ns})
				}
			}
			checkListEncoded(t, what+", limited", s, enc, storage.ListOptions{Limit: 2})
			checkListEncoded(t, what+", by alias prefix", s, enc, storage.ListOptions{AliasPrefix: "a"})
			// What a warm-up after the write keeps is as current. (Another
			// encoder, so that the listings above still find encodings
			// made before the write.)
			if _, err := s.WarmListed(ctx, warmed); err != nil {
				t.Fatalf("%s: WarmListed: %v", what, err)
			}
			for _, ns := range []string{"", nsA} {
				checkListEncoded(t, what+", after a warm-up", s, warmed, storage.ListOptions{Namespace: ns})
			}
		}
		a := create(t, s, storage.CreateRequest{Alias: "a1", Title: "a", Labels: map[string]string{"k": "v"}, Messages: msgs("a", 3)})
		pause()
		b := create(t, s, storage.CreateRequest{Alias: "b1", Title: "b", Messages: msgs("b", 2)})
		pause()
		x := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "x", Title: "expires"})
		check("after creates")

		appendMsgs(t, s, storage.Ref{ID: a.ID}, msg("a-more", "x"))
		check("after an append")

		_, err := s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: b.ID}, Fields: storage.UpdateTitle | storage.UpdateLabels,
			Title: "b renamed", Labels: map[string]string{"k": "w"}})
		must(t, "update", err)
		check("after an update of title and labels")

		_, err = s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: b.ID}, Fields: storage.UpdateAlias, Alias: "a2"})
		must(t, "update", err)
		check("after an alias change")

		f, err := s.Fork(ctx, storage.ForkRequest{Ref: storage.Ref{ID: a.ID}, MessageCount: 2, Alias: "a-fork"})
		must(t, "fork", err)
		check("after a fork")

		_, err = s.Rewind(ctx, storage.RewindRequest{Ref: storage.Ref{ID: a.ID}, MessageCount: 1})
		must(t, "rewind", err)
		check("after a rewind")

		_, err = s.Save(ctx, storage.SaveRequest{Ref: storage.Ref{ID: b.ID}, Title: "b saved", Summary: "s", Messages: msgs("saved", 4)})
		must(t, "save", err)
		check("after a save")

		must(t, "delete", s.Delete(ctx, storage.Ref{ID: f.ID}, 0))
		check("after a delete")

		// Deleted and created again with its id: a new session.
		create(t, s, storage.CreateRequest{ID: f.ID, Title: "same id again"})
		check("after a create that reuses a deleted id")

		time.Sleep(storage.MinExpireAfter + 50*time.Millisecond) // x is idle longer than nsA's time to live
		n, err := (&storage.Sweeper{Store: s, Defaults: map[string]time.Duration{nsA: storage.MinExpireAfter}}).Sweep(ctx)
		must(t, "sweep", err)
		if n != 1 {
			t.Fatalf("the sweep deleted %d sessions, want 1 (%s)", n, x.ID)
		}
		check("after a retention sweep")
		if !slices.Equal(sessionIDs(listAll(t, s, storage.ListOptions{Namespace: nsA})), nil) {
			t.Fatal("the expired session is still listed")
		}
	})
}

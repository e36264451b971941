package file

import (
	"fmt"
	"slices"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestCompactionsAcrossFolds: compactions recorded in journals that folds
// turn into segments read back after a reopen and after a crash, Check
// finds nothing wrong with them, and a rewind (which writes the session
// whole again) keeps those within what it keeps.
func TestCompactionsAcrossFolds(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, WithFoldThreshold(foldOften))
	a := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
	ref := storage.Ref{ID: a.ID}
	var all []string
	for i := range 40 {
		m := kib(fmt.Sprintf("a%d", i))
		mustAppend(t, s, a.ID, m)
		all = append(all, m.Id)
		if i%10 == 9 {
			sum := &sessiondv1.Message{Id: fmt.Sprintf("sum%d", i), Role: sessiondv1.Role_ROLE_SYSTEM, Content: "summary"}
			if _, err := s.Compact(t.Context(), storage.CompactRequest{Ref: ref, ThroughMessageID: m.Id, Summary: sum}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, segs := snapshotGen(t, dir, a.ID); segs == nil {
		t.Fatal("no fold happened; the test needs segments")
	}
	wantCtx := []string{"sum39"}
	check := func(t *testing.T, s *testStore) {
		t.Helper()
		se, ms, err := s.Load(t.Context(), ref, storage.LoadOptions{View: storage.ViewContext})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(ms); !slices.Equal(got, wantCtx) || se.Compaction == nil || se.Compaction.ThroughCount != 42 {
			t.Errorf("context view %v with compaction %+v; want %v through 42", got, se.Compaction, wantCtx)
		}
		// The earlier compactions are there too: a rewind falls back on them.
		rw, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 25})
		if err != nil {
			t.Fatal(err)
		}
		if rw.Compaction == nil || rw.Compaction.SummaryID != "sum19" {
			t.Errorf("after a rewind to 25: compaction %+v, want sum19's", rw.Compaction)
		}
		_, ms, err = s.Load(t.Context(), ref, storage.LoadOptions{View: storage.ViewContext})
		if want := append([]string{"sum19"}, all[20:23]...); err != nil || !slices.Equal(ids(ms), want) {
			t.Errorf("context view after a rewind: %v, %v; want %v", ids(ms), err, want)
		}
	}
	t.Run("crash", func(t *testing.T) { check(t, openStore(t, crashCopy(t, dir))) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(t.Context(), dir, false, nil)
	if err != nil || rep.Damaged() {
		t.Fatalf("Check: %+v, %v", rep, err)
	}
	t.Run("reopen", func(t *testing.T) { check(t, openStore(t, dir, WithFoldThreshold(foldOften))) })
}

package file

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sessiond/sessiond/storage"
)

// A run of an index file decodes into a few allocations whatever its
// number of entries (but maps that differ), and gives back what was
// encoded: equal labels share one map.
func TestDecodeIndexRunShares(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	metas := make([]*storage.Session, 500)
	for i := range metas {
		metas[i] = &storage.Session{ID: uuid.NewString(), Namespace: "ns", Alias: fmt.Sprintf("a-%d", i), Title: fmt.Sprintf("title %d", i),
			Summary: "summary", CreatedAt: t0, UpdatedAt: t0.Add(time.Duration(i)), Revision: uint64(i + 1), MessageCount: int64(i),
			Parent: &storage.ForkOrigin{SessionID: uuid.NewString(), MessageCount: 3},
			Labels: map[string]string{"team": fmt.Sprint(i % 4)}, Metadata: map[string]string{"n": fmt.Sprint(i)}}
	}
	data := encodeIndex(make([]byte, 16), "ns", metas)
	p, off, _ := readFrame(data, 0)
	if p[0] != typeIndexHead {
		t.Fatal("no index header")
	}
	run, next, _ := readFrame(data, off)
	if next != len(data) {
		t.Fatal("want one run")
	}
	got, err := decodeIndexRun(run[1:], "ns")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(metas, got); d != "" {
		t.Fatalf("decoded run differs (-want +got):\n%s", d)
	}
	if fmt.Sprintf("%p", got[0].Labels) != fmt.Sprintf("%p", got[4].Labels) {
		t.Fatalf("entries 0 and 4 do not share their labels %v, %v", got[0].Labels, got[4].Labels)
	}
	// Per entry its parent and its metadata map (two allocations); per
	// run the slab, strings, pointers, scratch space and four labels maps.
	allocs := testing.AllocsPerRun(5, func() { _, _ = decodeIndexRun(run[1:], "ns") })
	if max := float64(40 + 3*len(metas)); allocs > max {
		t.Fatalf("decoding %d entries took %.0f allocations, want at most %.0f", len(metas), allocs, max)
	}
}

// Sessions whose labels came from one shared map at Open keep theirs when
// one of them changes its labels, and so does the stored state.
func TestSharedLabelsStayApart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		se, err := s.Create(t.Context(), storage.CreateRequest{Labels: map[string]string{"team": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, se.ID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := func() *storage.Store {
		s, err := Open(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s = reopen()
	if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: ids[0]}, Fields: storage.UpdateLabels,
		Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	check := func(s *storage.Store) {
		t.Helper()
		for i, id := range ids {
			se, err := s.Get(t.Context(), storage.Ref{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"team": "a"}
			if i == 0 {
				want["team"] = "b"
			}
			if d := cmp.Diff(want, se.Labels); d != "" {
				t.Errorf("session %d labels (-want +got):\n%s", i, d)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	defer s.Close()
	check(s)
}

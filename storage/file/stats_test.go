package file

import (
	"errors"
	"testing"

	"github.com/sessiond/sessiond/storage"
)

// TestStats: the sessions listed, the data dir's size, the message cache
// (a load of a session in memory is a hit, the first after a reopen a miss)
// and the open journals.
func TestStats(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, WithMaxOpenJournals(2), WithCacheBytes(1<<20))
	var ids []string
	for range 3 {
		ids = append(ids, mustCreate(t, s, storage.CreateRequest{}).ID)
	}
	mustCreate(t, s, storage.CreateRequest{Namespace: "other"})
	for _, id := range ids {
		mustAppend(t, s, id, msgs(id, 2)...)
	}
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != 4 {
		t.Errorf("Sessions = %d, want 4", st.Sessions)
	}
	if st.DiskBytes <= 0 {
		t.Errorf("DiskBytes = %d, want > 0", st.DiskBytes)
	}
	if st.Journals == nil || st.Journals.Open != 2 || st.Journals.Max != 2 || st.Journals.Opens != 3 {
		t.Errorf("Journals = %+v, want 2 open of at most 2, 3 opens (one per session written)", st.Journals)
	}
	if st.Cache == nil || st.Cache.Bytes <= 0 || st.Cache.MaxBytes != 1<<20 {
		t.Fatalf("Cache = %+v, want bytes cached under a budget of 1 MiB", st.Cache)
	}
	hits, misses := st.Cache.Hits, st.Cache.Misses
	if _, err := loadIDs(t, s, ids[0]); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Stats(t.Context())
	if st.Cache.Hits != hits+1 || st.Cache.Misses != misses {
		t.Errorf("after a load from memory: hits %d -> %d, misses %d -> %d; want one more hit", hits, st.Cache.Hits, misses, st.Cache.Misses)
	}
	must(t, s.Close())

	s2 := openStore(t, dir)
	if _, err := loadIDs(t, s2, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := loadIDs(t, s2, ids[0]); err != nil {
		t.Fatal(err)
	}
	st, err = s2.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Cache.Misses != 1 || st.Cache.Hits != 1 {
		t.Errorf("after a reopen and two loads: hits %d, misses %d; want 1, 1", st.Cache.Hits, st.Cache.Misses)
	}
	if st.Sessions != 4 {
		t.Errorf("after a reopen: Sessions = %d, want 4", st.Sessions)
	}
	must(t, s2.Close())
	if _, err := s2.Stats(t.Context()); !errors.Is(err, storage.ErrClosed) {
		t.Error("Stats after Close: want ErrClosed")
	}
}

// BenchmarkStatsDiskWalk: what one measurement of the data dir costs at
// 100,000 sessions (Stats runs it in the background, spaced out).
func BenchmarkStatsDiskWalk(b *testing.B) {
	dir := bigFixture(b)
	s, err := openDriver(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if n, err := s.walkDisk(); err != nil || n <= 0 {
			b.Fatalf("walkDisk = %d, %v", n, err)
		}
	}
}

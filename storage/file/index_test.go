package file

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// A run of an index file decodes into a few allocations whatever its
// number of entries (but maps that differ), and gives back what was
// encoded: equal labels share one map.
func TestDecodeIndexRunShares(t *testing.T) {
	metas := indexMetas(500, "ns", 4)
	for i, m := range metas {
		m.Summary, m.Revision, m.MessageCount = "summary", uint64(i+1), int64(i)
		m.Parent = &storage.ForkOrigin{SessionID: uuid.NewString(), MessageCount: 3}
		m.Metadata = map[string]string{"n": fmt.Sprint(i)}
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

// indexMetas makes n sessions of namespace ns shaped like
// BenchmarkOpen100k's: an alias, a title, one of teams labels, one
// message.
func indexMetas(n int, ns string, teams int) []*storage.Session {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	metas := make([]*storage.Session, n)
	for i := range metas {
		t := base.Add(time.Duration(i) * time.Second)
		metas[i] = &storage.Session{ID: uuid.NewString(), Namespace: ns, Alias: fmt.Sprintf("s-%d", i), Title: fmt.Sprintf("session %d", i),
			CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: 1, Labels: map[string]string{"team": fmt.Sprint(i % teams)}}
	}
	return metas
}

// BenchmarkDecodeIndex decodes one namespace's index file of 100,000
// sessions shaped like BenchmarkOpen100k's (alias, title, one label): the
// part of an Open after a clean stop that grows with the sessions.
func BenchmarkDecodeIndex(b *testing.B) {
	metas := indexMetas(fixtureSessions, "bench", 10)
	data := encodeIndex(make([]byte, 16), "bench", metas)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		_, _, got, err := decodeIndex(data)
		if err != nil || len(got) != len(metas) {
			b.Fatalf("decoded %d, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used so far, all threads
// (the garbage collector's and parallel decoders' too): on a shared
// machine it varies much less than wall time.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

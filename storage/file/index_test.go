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
// number of entries (their labels apart), and gives back what was
// encoded.
func TestDecodeIndexRunShares(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	metas := make([]*storage.Session, 500)
	for i := range metas {
		metas[i] = &storage.Session{ID: uuid.NewString(), Namespace: "ns", Alias: fmt.Sprintf("a-%d", i), Title: fmt.Sprintf("title %d", i),
			Summary: "summary", CreatedAt: t0, UpdatedAt: t0.Add(time.Duration(i)), Revision: uint64(i + 1), MessageCount: int64(i),
			Parent: &storage.ForkOrigin{SessionID: uuid.NewString(), MessageCount: 3}}
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
	// Entries, strings, pointers, and each entry's parent.
	allocs := testing.AllocsPerRun(5, func() { _, _ = decodeIndexRun(run[1:], "ns") })
	if max := float64(3 + len(metas)); allocs > max {
		t.Fatalf("decoding %d entries took %.0f allocations, want at most %.0f", len(metas), allocs, max)
	}
}

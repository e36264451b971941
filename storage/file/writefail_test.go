package file

import (
	"errors"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// TestFailedWriteNotServed: a write whose flush fails, on a disk that then
// refuses to cut its bytes off the journal again (an ext4 aborted under
// errors=remount-ro does both), is UNAVAILABLE, and no reader ever sees it:
// not from memory, not from a reload of the session's files while the cut
// is pending, not after the next write or a reopen.
func TestFailedWriteNotServed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
	mustAppend(t, s, se.ID, msg("acked", "acknowledged"))
	want := []string{"m0", "m1", "acked"}

	s.testHooks().sync = func() error { return unix.EIO }
	s.testHooks().cut = func() error { return unix.EROFS }
	_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("lost", 2)})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Append whose flush failed = %v, want ErrUnavailable", err)
	}
	_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: se.ID}, Fields: storage.UpdateAlias, Alias: "lost"})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Update whose flush failed = %v, want ErrUnavailable", err)
	}
	check := func(when string, want []string, rev uint64) {
		t.Helper()
		got, err := loadIDs(t, s, se.ID)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: Load = %v, %v; want %v", when, got, err, want)
		}
		m, err := s.Get(t.Context(), storage.Ref{ID: se.ID})
		if err != nil || m.Revision != rev || m.Alias != "" {
			t.Errorf("%s: Get = %+v, %v; want revision %d, no alias", when, m, err, rev)
		}
	}
	check("after the failed writes", want, se.Revision+1)

	// The session's files read again (as after a cache eviction) while
	// the disk still refuses the cut: only what was acknowledged.
	e := entryOf(t, s, se.ID)
	e.wmu.Lock()
	s.forget(e)
	e.wmu.Unlock()
	check("reloaded while the cut is pending", want, se.Revision+1)

	// While the cut keeps failing, writes keep failing and leave nothing.
	s.testHooks().sync = nil
	if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("refused", 1)}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Append while the journal cannot be cut = %v, want ErrUnavailable", err)
	}
	check("after a write refused for the pending cut", want, se.Revision+1)

	// The disk recovers: the next write cuts the journal first, then lands.
	s.testHooks().cut = nil
	mustAppend(t, s, se.ID, msg("next", "after recovery"))
	want = append(want, "next")
	check("after recovery", want, se.Revision+2)
	b, err := os.ReadFile(journalPath(t, dir, se.ID))
	if err != nil {
		t.Fatal(err)
	}
	jc, err := decodeJournal(b)
	if err != nil || jc.torn || len(jc.records) != 2 || !allZero(b[jc.end:]) {
		t.Errorf("journal after recovery: %d records, torn %v, %v; want the two acknowledged appends and zeros", len(jc.records), jc.torn, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	check("after reopen", want, se.Revision+2)
}

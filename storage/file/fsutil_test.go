package file

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// journalRecords reads session id's journal file in dir: its records,
// and whether only zeros follow them.
func journalRecords(t *testing.T, dir, id string) (int, bool) {
	t.Helper()
	b, err := os.ReadFile(journalPath(t, dir, id))
	if err != nil {
		t.Fatal(err)
	}
	jc, err := decodeJournal(b)
	if err != nil || jc.torn {
		t.Fatalf("journal: torn %v, %v", jc.torn, err)
	}
	return len(jc.records), allZero(b[jc.end:])
}

// TestFailedWriteNotServed: a write whose flush fails is UNAVAILABLE and
// leaves nothing in the journal file (a frame goes there only once the
// log holds it durably), so no reader ever sees it: not from memory, not
// from a reload of the session's files, not after the next write or a
// reopen.
func TestFailedWriteNotServed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
	mustAppend(t, s, se.ID, msg("acked", "acknowledged"))
	want := []string{"m0", "m1", "acked"}

	s.testHooks().sync = func() error { return unix.EIO }
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

	// The session's files read again (as after a cache eviction, which
	// writes the pending frames first): only what was acknowledged.
	e := entryOf(t, s, se.ID)
	e.wmu.Lock()
	s.forget(e)
	e.wmu.Unlock()
	if n, zeros := journalRecords(t, dir, se.ID); n != 1 || !zeros {
		t.Errorf("journal after the failed writes: %d records, zeros after them %v; want the acknowledged append alone", n, zeros)
	}
	check("reloaded", want, se.Revision+1)

	// The disk recovers: the next write lands.
	s.testHooks().sync = nil
	mustAppend(t, s, se.ID, msg("next", "after recovery"))
	want = append(want, "next")
	check("after recovery", want, se.Revision+2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, zeros := journalRecords(t, dir, se.ID); n != 2 || !zeros {
		t.Errorf("journal after Close: %d records, zeros after them %v; want the two acknowledged appends", n, zeros)
	}
	s = openStore(t, dir)
	check("after reopen", want, se.Revision+2)
}

// TestPendingWriteFails: while a journal refuses its pending frames
// (already durable in the log), the session stays in memory, its writes
// fail as UNAVAILABLE once its pending frames must go first, and nothing
// acknowledged is lost: not after a crash then, nor after the disk
// recovers and the store closes.
func TestPendingWriteFails(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
	want := []string{"m0", "m1"}
	s.testHooks().pending = func() error { return unix.EIO }
	body := strings.Repeat("p", 1024)
	refused := false
	for i := range 2 * pendingMax / len(body) {
		id := fmt.Sprintf("p%d", i)
		_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: []*sessiondv1.Message{msg(id, body)}})
		if err != nil {
			if !errors.Is(err, storage.ErrUnavailable) {
				t.Fatalf("Append while the journal refuses writes = %v, want ErrUnavailable", err)
			}
			refused = true
			break
		}
		want = append(want, id)
	}
	if !refused {
		t.Fatalf("%d appends while the journal refuses writes all succeeded; want the one past %d pending bytes refused", len(want)-2, pendingMax)
	}
	// Evicting the session would lose its pending frames: it stays.
	e := entryOf(t, s, se.ID)
	e.wmu.Lock()
	s.forget(e)
	kept := e.view.Load() != nil
	e.wmu.Unlock()
	if !kept {
		t.Error("the session left memory while its journal refused its pending frames")
	}
	if got, err := loadIDs(t, s, se.ID); err != nil || !slices.Equal(got, want) {
		t.Errorf("Load = %v, %v; want %v", got, err, want)
	}
	crashed := crashCopy(t, dir)
	if got, err := loadIDs(t, openStore(t, crashed), se.ID); err != nil || !slices.Equal(got, want) {
		t.Errorf("after a crash: %v, %v; want %v", got, err, want)
	}

	s.testHooks().pending = nil
	mustAppend(t, s, se.ID, msg("next", body))
	want = append(want, "next")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, zeros := journalRecords(t, dir, se.ID); n != len(want)-2 || !zeros {
		t.Errorf("journal after Close: %d records, zeros after them %v; want %d", n, zeros, len(want)-2)
	}
	s = openStore(t, dir)
	if got, err := loadIDs(t, s, se.ID); err != nil || !slices.Equal(got, want) {
		t.Errorf("after reopen: %v, %v; want %v", got, err, want)
	}
}

// TestFailedAppendRetried: the ids of an append whose flush failed stay
// free, so that its retry lands whole once the disk recovers.
func TestFailedAppendRetried(t *testing.T) {
	s := open(t, t.TempDir())
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 1)})
	s.testHooks().sync = func() error { return unix.EIO }
	if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("r", 2)}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Append whose flush failed = %v, want ErrUnavailable", err)
	}
	s.testHooks().sync = nil
	res, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("r", 2)})
	if err != nil || res.Appended != 2 {
		t.Fatalf("retried Append = %+v, %v; want 2 appended", res, err)
	}
	if got, err := loadIDs(t, s, se.ID); err != nil || !slices.Equal(got, []string{"m0", "r0", "r1"}) {
		t.Errorf("Load = %v, %v; want m0 r0 r1", got, err)
	}
}

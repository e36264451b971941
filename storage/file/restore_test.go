package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/storage"
)

// TestRestoreQuarantined: a session whose snapshot header is damaged after
// a crash (so no checkpoint vouches for its metadata) is moved to
// quarantine/ whole by repair and answers NotFound; Restore brings its
// intact messages back under its id, at a revision above the one it had,
// keeps the quarantined copy, and refuses while the store is open, for a
// session in service, and for one quarantine/ does not hold.
func TestRestoreQuarantined(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	victim := mustCreate(t, s, storage.CreateRequest{Alias: "victim", Messages: msgs("m", 20)})
	for j := range 5 {
		mustAppend(t, s, victim.ID, msg(fmt.Sprintf("x%d", j), strings.Repeat("z", 40)))
	}
	other := mustCreate(t, s, storage.CreateRequest{Alias: "other", Messages: msgs("o", 3)})
	before, err := s.Get(t.Context(), storage.Ref{ID: victim.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "sessions", victim.ID, snapshotName)
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0x10
	if err := os.WriteFile(snap, b, filePerm); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(dir, "index", cleanName)) // as after a crash

	if _, err := Check(t.Context(), dir, true, nil); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir)
	if _, err := s2.Get(t.Context(), storage.Ref{ID: victim.ID}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("after repair, Get = %v; want the session quarantined (ErrNotFound)", err)
	}
	if _, err := Restore(t.Context(), dir, victim.ID); !errors.Is(err, storage.ErrLocked) {
		t.Fatalf("Restore while the store is open = %v; want ErrLocked", err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := Restore(t.Context(), dir, victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != victim.ID || !strings.HasPrefix(r.From, filepath.Join("quarantine")+string(filepath.Separator)) ||
		!strings.Contains(r.Detail, "salvaged 25 messages") || !strings.Contains(r.Detail, "metadata is lost") {
		t.Errorf("Restore = %+v; want the 25 messages from quarantine/, metadata lost", r)
	}
	if _, err := os.Stat(filepath.Join(dir, r.From, snapshotName)); err != nil {
		t.Errorf("the quarantined copy is gone: %v", err)
	}
	rep, err := Check(t.Context(), dir, false, nil)
	if err != nil || rep.Damaged() {
		t.Fatalf("Check after Restore = %+v, %v; want no damage", rep, err)
	}

	s3 := open(t, dir)
	got, err := s3.Get(t.Context(), storage.Ref{ID: victim.ID})
	if err != nil || got.Revision <= before.Revision || got.MessageCount != 25 {
		t.Fatalf("restored session = %+v, %v; want 25 messages at a revision above %d", got, err, before.Revision)
	}
	ids, err := loadIDs(t, s3, victim.ID)
	if err != nil || len(ids) != 25 || ids[0] != "m0" || ids[24] != "x4" {
		t.Fatalf("restored messages = %v, %v", ids, err)
	}
	listed := 0
	if err := s3.List(t.Context(), storage.ListOptions{}, func(*storage.Session) error { listed++; return nil }); err != nil || listed != 2 {
		t.Fatalf("List after Restore: %d sessions, %v; want both", listed, err)
	}
	mustAppend(t, s3, victim.ID, msg("after", "writable again"))
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := Restore(t.Context(), dir, victim.ID); !errors.Is(err, storage.ErrAlreadyExists) {
		t.Errorf("Restore of a session in service = %v; want ErrAlreadyExists", err)
	}
	if _, err := Restore(t.Context(), dir, other.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Restore of a session never quarantined = %v; want ErrNotFound", err)
	}
	if _, err := Restore(t.Context(), dir, "../x"); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("Restore of a malformed id = %v; want ErrInvalid", err)
	}
}

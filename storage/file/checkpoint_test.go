package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// noAutoCheckpoints keeps the background loop from writing checkpoints, so
// that a test decides when they happen and can copy the dir meanwhile.
var noAutoCheckpoints = WithCheckpoints(time.Hour, 1<<30)

// markSeq returns the current checkpoint's sequence number, 0 if none.
func markSeq(t *testing.T, dir string) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "index", cleanName))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	seq, _, _, err := decodeMark(data)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// snapshotState returns every live session's metadata, in list order per
// namespace, and its message ids.
func snapshotState(t *testing.T, s *testStore, namespaces ...string) (map[string][]*storage.Session, map[string][]string) {
	t.Helper()
	lists := map[string][]*storage.Session{}
	msgIDs := map[string][]string{}
	for _, ns := range namespaces {
		var l []*storage.Session
		if err := s.List(t.Context(), storage.ListOptions{Namespace: ns}, func(m *storage.Session) error {
			l = append(l, m)
			return nil
		}); err != nil {
			t.Fatalf("List %q: %v", ns, err)
		}
		lists[ns] = l
		for _, m := range l {
			_, ms, err := s.Load(t.Context(), storage.Ref{Namespace: ns, ID: m.ID}, storage.LoadOptions{})
			if err != nil {
				t.Fatalf("Load %s: %v", m.ID, err)
			}
			msgIDs[m.ID] = ids(ms)
		}
	}
	return lists, msgIDs
}

func checkState(t *testing.T, s *testStore, wantLists map[string][]*storage.Session, wantMsgs map[string][]string) {
	t.Helper()
	var namespaces []string
	for ns := range wantLists {
		namespaces = append(namespaces, ns)
	}
	lists, msgs := snapshotState(t, s, namespaces...)
	if diff := cmp.Diff(wantLists, lists); diff != "" {
		t.Errorf("sessions after the crash (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMsgs, msgs); diff != "" {
		t.Errorf("messages after the crash (-want +got):\n%s", diff)
	}
}

// dataEnd returns where the frames of a file end, before the zeros reserved
// after them.
func dataEnd(b []byte) int {
	_, end, _, _ := scanFrames(b)
	return end
}

func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	d := t.TempDir()
	copyDir(t, dir, d) // the store stays open: no last checkpoint, as after kill -9
	return d
}

// TestCrashAfterCheckpoint: after a checkpoint, every kind of write to some
// sessions, then a crash. The reopened store trusts the checkpoint for the
// untouched session only, rescans the rest, and has every acknowledged write,
// with the same listing (revisions, counts, updated_at, aliases).
func TestCrashAfterCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints, WithFoldThreshold(4<<10))
	untouched := mustCreate(t, s, storage.CreateRequest{Alias: "untouched", Labels: map[string]string{"k": "v"}, Messages: msgs("u", 3)})
	appended := mustCreate(t, s, storage.CreateRequest{Alias: "appended", Messages: msgs("a", 2)})
	renamed := mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "old-name"})
	saved := mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "saved", Messages: msgs("s", 4)})
	rewound := mustCreate(t, s, storage.CreateRequest{Alias: "rewound", Messages: msgs("r", 5)})
	deleted := mustCreate(t, s, storage.CreateRequest{Alias: "deleted"})
	reusedID := uuid.Must(uuid.NewV7()).String()
	mustCreate(t, s, storage.CreateRequest{ID: reusedID, Alias: "reused", Messages: msgs("x", 1)})
	for i := range 4 {
		mustAppend(t, s, reusedID, msg(fmt.Sprintf("y%d", i), "before the checkpoint"))
	}
	folded := mustCreate(t, s, storage.CreateRequest{Alias: "folded"})
	mustAppend(t, s, untouched.ID, msg("u-late", "before the checkpoint"))
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}

	mustAppend(t, s, appended.ID, msg("a-new1", "x"), msg("a-new2", "y"))
	mustAppend(t, s, appended.ID, msg("a-new3", "z"))
	if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: "ns1", ID: renamed.ID},
		Fields: storage.UpdateAlias | storage.UpdateTitle, Alias: "new-name", Title: "renamed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: "ns1", ID: saved.ID}, Title: "saved", Messages: msgs("s2-", 2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{ID: rewound.ID}, MessageCount: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), storage.Ref{ID: deleted.ID}, 0); err != nil {
		t.Fatal(err)
	}
	// The same id again, at revision 1, below the checkpoint's revision 5.
	if err := s.Delete(t.Context(), storage.Ref{ID: reusedID}, 0); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, storage.CreateRequest{ID: reusedID, Alias: "reused-again", Messages: msgs("z", 1)})
	mustCreate(t, s, storage.CreateRequest{Namespace: "ns2", Alias: "created", Messages: msgs("c", 2)})
	for i := range 10 {
		mustAppend(t, s, folded.ID, msg(fmt.Sprintf("f%d", i), strings.Repeat("f", 1024)))
	}
	if gen, segs := snapshotGen(t, dir, folded.ID); gen == 1 || segs == nil {
		t.Fatalf("session was not folded: snapshot generation %d, segments %v", gen, segs)
	}

	wantLists, wantMsgs := snapshotState(t, s, "", "ns1", "ns2")
	crashed := crashCopy(t, dir)
	s2 := openStore(t, crashed)
	if s2.openTrusted != 1 || s2.openScanned != 7 {
		t.Errorf("open after the crash trusted %d sessions and scanned %d; want 1 (the untouched one) and 7", s2.openTrusted, s2.openScanned)
	}
	checkState(t, s2, wantLists, wantMsgs)
	for _, ref := range []storage.Ref{{Namespace: "ns1", Alias: "old-name"}, {Alias: "deleted"}, {Alias: "reused"}, {ID: deleted.ID}} {
		if _, err := s2.Get(t.Context(), ref); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get %+v after the crash = %v, want ErrNotFound", ref, err)
		}
	}
	if got, err := s2.Get(t.Context(), storage.Ref{Alias: "reused-again"}); err != nil || got.ID != reusedID || got.Revision != 1 {
		t.Errorf("re-created session after the crash = %+v, %v; want %s at revision 1", got, err, reusedID)
	}
	mustAppend(t, s2, appended.ID, msg("after", "the crash"))
}

// TestCrashDuringCheckpoint: a checkpoint cut short before its mark leaves
// the previous one in force, and the writes the log holds after that one's
// position must still be rescanned.
func TestCrashDuringCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints)
	a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("a", 2)})
	b := mustCreate(t, s, storage.CreateRequest{Alias: "b", Messages: msgs("b", 2)})
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	seq := markSeq(t, dir)
	mustAppend(t, s, a.ID, msg("a-after", "first checkpoint"))
	s.testHooks().mark = func() error { return errors.New("crash before the mark") }
	if err := s.checkpoint(false); err == nil {
		t.Fatal("checkpoint with a failing mark succeeded")
	}
	s.testHooks().mark = nil
	if got := markSeq(t, dir); got != seq {
		t.Fatalf("mark moved to %d after a failed checkpoint; want %d", got, seq)
	}
	// b's first change since the checkpoint in force, after the failed
	// one began.
	mustAppend(t, s, b.ID, msg("b-after", "the failed checkpoint"))
	wantLists, wantMsgs := snapshotState(t, s, "")
	s2 := openStore(t, crashCopy(t, dir))
	if s2.openScanned != 2 {
		t.Errorf("open scanned %d sessions, want 2", s2.openScanned)
	}
	checkState(t, s2, wantLists, wantMsgs)
}

// TestCheckpointDuringWrite: a checkpoint taken while a write is between
// recording the session and publishing its result leaves the session out,
// so that the crash after it still rescans the session.
func TestCheckpointDuringWrite(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints)
	a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("a", 2)})
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, a.ID, msg("a-1", "named in the log"))
	var hookErr error
	s.testHooks().write = func(*entry) {
		s.testHooks().write = nil
		hookErr = s.checkpoint(false)
	}
	if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: a.ID}, Fields: storage.UpdateAlias, Alias: "a-renamed"}); err != nil {
		t.Fatal(err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	wantLists, wantMsgs := snapshotState(t, s, "")
	s2 := openStore(t, crashCopy(t, dir))
	if s2.openScanned != 1 {
		t.Errorf("open scanned %d sessions, want 1", s2.openScanned)
	}
	checkState(t, s2, wantLists, wantMsgs)
	if _, err := s2.Get(t.Context(), storage.Ref{Alias: "a-renamed"}); err != nil {
		t.Errorf("alias set during the checkpoint: %v", err)
	}
}

// TestOneSyncPerAppend: an append costs one fdatasync (its log flush),
// the first after a checkpoint as much as the others.
func TestOneSyncPerAppend(t *testing.T) {
	s := openStore(t, t.TempDir(), noAutoCheckpoints)
	se := mustCreate(t, s, storage.CreateRequest{})
	syncs := func() int64 {
		before := s.stats.journalSyncs.Load()
		mustAppend(t, s, se.ID, msg(uuid.NewString(), "x"))
		return s.stats.journalSyncs.Load() - before
	}
	for round := range 2 {
		for i := range 3 {
			if got := syncs(); got != 1 {
				t.Errorf("round %d, append %d after the checkpoint: %d fdatasyncs, want 1", round, i, got)
			}
		}
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointTriggers: the background loop writes a checkpoint once
// enough sessions changed, and once the interval passed with any change.
func TestCheckpointTriggers(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  Option
	}{
		{"dirty", WithCheckpoints(time.Hour, 3)},
		{"interval", WithCheckpoints(20*time.Millisecond, 1<<30)},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, c.opt)
			se := mustCreate(t, s, storage.CreateRequest{})
			mustAppend(t, s, se.ID, msg("m", "x"))
			mustCreate(t, s, storage.CreateRequest{})
			deadline := time.Now().Add(10 * time.Second)
			for markSeq(t, dir) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no checkpoint written within 10 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestCheckpointDamage: a damaged or missing mark or checkpoint folder is
// derived data: the open after the crash rescans everything and loses
// nothing. A damaged index file costs a rescan of its namespace.
func TestCheckpointDamage(t *testing.T) {
	// where gets the size of the file's data (without the zeros reserved
	// after it).
	flip := func(path func(*testing.T, string) string, where func(size int) int) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			p := path(t, dir)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[where(dataEnd(b))] ^= 0x08
			must(t, os.WriteFile(p, b, filePerm))
		}
	}
	const all = 4
	cases := []struct {
		name    string
		damage  func(*testing.T, string)
		scanned int
	}{
		{"mark flipped", flip(func(_ *testing.T, dir string) string { return filepath.Join(dir, "index", cleanName) }, func(int) int { return 10 }), all},
		{"mark deleted", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, "index", cleanName))) }, all},
		{"checkpoint folder deleted", func(t *testing.T, dir string) {
			must(t, os.RemoveAll(filepath.Dir(indexFile(t, dir, ""))))
		}, all},
		// ns1's two sessions are rescanned; of the default namespace's, only
		// the one written to since.
		{"index file flipped", flip(func(t *testing.T, dir string) string { return indexFile(t, dir, "ns1") }, func(n int) int { return n - 30 }), 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, noAutoCheckpoints)
			a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("a", 2)})
			mustCreate(t, s, storage.CreateRequest{Alias: "b", Messages: msgs("b", 2)})
			c1 := mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "c1", Messages: msgs("c", 2)})
			mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "c2"})
			for i := range 3 {
				mustAppend(t, s, a.ID, msg(fmt.Sprintf("old%d", i), "before the checkpoint"))
			}
			if err := s.checkpoint(false); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, s, a.ID, msg("new", "after the checkpoint"))
			if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{Namespace: "ns1", ID: c1.ID}, Fields: storage.UpdateAlias, Alias: "c1-renamed"}); err != nil {
				t.Fatal(err)
			}
			wantLists, wantMsgs := snapshotState(t, s, "", "ns1")
			crashed := crashCopy(t, dir)
			c.damage(t, crashed)
			s2 := openStore(t, crashed)
			if s2.openScanned != c.scanned {
				t.Errorf("open scanned %d sessions, want %d", s2.openScanned, c.scanned)
			}
			checkState(t, s2, wantLists, wantMsgs)
		})
	}
}

// TestCheckpointRevisionBound: after a crash, a session whose files hold
// less than the checkpoint recorded answers ErrDataLoss, whether the
// checkpoint is trusted for it or it was rescanned.
func TestCheckpointRevisionBound(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints, WithWALSegmentBytes(4<<10))
	trusted := mustCreate(t, s, storage.CreateRequest{Alias: "trusted"})
	dirty := mustCreate(t, s, storage.CreateRequest{Alias: "dirty"})
	tails := map[string]int64{}
	for _, id := range []string{trusted.ID, dirty.ID} {
		mustAppend(t, s, id, msg("one", "x"))
		tails[id] = entryOf(t, s, id).j.tail // the journal as of revision 2
		mustAppend(t, s, id, msg("two", "y"))
	}
	// A message bigger than a segment starts the next one, so that the
	// checkpoint's position is past the segment holding the records above,
	// which is then retired.
	filler := mustCreate(t, s, storage.CreateRequest{})
	mustAppend(t, s, filler.ID, msg("filler", strings.Repeat("f", 8<<10)))
	old := s.walPath(s.logEnd().seq - 1)
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not retired after the checkpoint past it", old)
		}
	}
	mustAppend(t, s, dirty.ID, msg("three", "z"))
	crashed := crashCopy(t, dir)
	// Lose acknowledged records at a frame boundary, which on its own looks
	// like a journal that never had them, after the write-ahead log segment
	// that also held them was retired.
	for id, tail := range tails {
		must(t, os.Truncate(journalPath(t, crashed, id), tail))
	}
	rep, err := Check(t.Context(), crashed, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := 0
	for _, f := range rep.Findings {
		if f.Kind == KindCorrupt {
			corrupt++
		}
	}
	if corrupt != 2 {
		t.Errorf("Check findings %+v; want both sessions corrupt", rep.Findings)
	}
	s2 := open(t, crashed)
	if _, err := s2.Get(t.Context(), storage.Ref{ID: dirty.ID}); !errors.Is(err, storage.ErrDataLoss) {
		t.Errorf("Get of the rescanned session = %v, want ErrDataLoss", err)
	}
	if _, err := s2.Get(t.Context(), storage.Ref{Alias: "dirty"}); !errors.Is(err, storage.ErrDataLoss) {
		t.Errorf("Get of the rescanned session by alias = %v, want ErrDataLoss", err)
	}
	if _, err := loadIDs(t, s2, trusted.ID); !errors.Is(err, storage.ErrDataLoss) {
		t.Errorf("Load of the trusted session = %v, want ErrDataLoss", err)
	}
}

// TestVanishedSessionReset: a session the checkpoint knows, gone from disk
// at open (moved to quarantine, say) and created again with its id, is the
// new session after a crash, not the checkpoint's.
func TestVanishedSessionReset(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints)
	id := uuid.Must(uuid.NewV7()).String()
	mustCreate(t, s, storage.CreateRequest{ID: id, Alias: "v", Messages: msgs("m", 3)})
	for i := range 3 {
		mustAppend(t, s, id, msg(fmt.Sprintf("x%d", i), "y"))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	must(t, os.RemoveAll(filepath.Join(dir, "sessions", id)))
	s2 := open(t, dir, noAutoCheckpoints)
	if _, err := s2.Get(t.Context(), storage.Ref{ID: id}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("vanished session: %v, want ErrNotFound", err)
	}
	mustCreate(t, s2, storage.CreateRequest{ID: id, Alias: "v2"})
	wantLists, wantMsgs := snapshotState(t, s2, "")
	s3 := openStore(t, crashCopy(t, dir))
	checkState(t, s3, wantLists, wantMsgs)
}

// TestCheckpointConcurrentWrites: checkpoints taken over and over while
// writers change sessions; after a crash at the end, nothing differs.
func TestCheckpointConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints, WithFoldThreshold(8<<10))
	var sessions []string
	for i := range 8 {
		sessions = append(sessions, mustCreate(t, s, storage.CreateRequest{Alias: fmt.Sprintf("s%d", i)}).ID)
	}
	stop := make(chan struct{})
	ckDone := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				ckDone <- nil
				return
			default:
			}
			if err := s.checkpoint(false); err != nil {
				ckDone <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 30 {
				id := sessions[(w*3+i)%len(sessions)]
				var err error
				switch i % 5 {
				case 0, 1, 2:
					_, err = s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: id}, Messages: []*sessiondv1.Message{msg(fmt.Sprintf("w%d-%d", w, i), strings.Repeat("p", 300))}})
				case 3:
					_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: id}, Fields: storage.UpdateTitle, Title: fmt.Sprintf("t%d-%d", w, i)})
				case 4:
					_, err = s.Create(t.Context(), storage.CreateRequest{Namespace: "extra", Messages: msgs(fmt.Sprintf("e%d-%d-", w, i), 2)})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-ckDone; err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, sessions[0], msg("last", "after the last checkpoint"))
	wantLists, wantMsgs := snapshotState(t, s, "", "extra")
	s2 := openStore(t, crashCopy(t, dir))
	checkState(t, s2, wantLists, wantMsgs)
}

// TestCheckUnderstandsCheckpoints: Check finds nothing wrong with the index
// folder a running store leaves (checkpoint, stale ones), and reports a
// damaged index file as derived data, which repair rebuilds.
func TestCheckUnderstandsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, noAutoCheckpoints)
	a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("a", 2)})
	mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "b"})
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, a.ID, msg("after", "checkpoint"))
	s.testHooks().mark = func() error { return errors.New("crash before the mark") }
	_ = s.checkpoint(false) // leaves the previous mark in force
	s.testHooks().mark = nil
	crashed := crashCopy(t, dir)
	rep, err := Check(t.Context(), crashed, false, nil)
	if err != nil || rep.Damaged() {
		t.Fatalf("Check of a crashed store's dir = %+v, %v; want nothing found", rep, err)
	}
	p := indexFile(t, crashed, "")
	b, _ := os.ReadFile(p)
	b[dataEnd(b)-10] ^= 1
	must(t, os.WriteFile(p, b, filePerm))
	rep, err = Check(t.Context(), crashed, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != KindIndex || !strings.Contains(rep.Findings[0].Path, ckptPref) || !rep.Findings[0].Repaired {
		t.Fatalf("findings %+v; want the index file, as index, repaired", rep.Findings)
	}
	rep, err = Check(t.Context(), crashed, false, nil)
	if err != nil || rep.Damaged() {
		t.Fatalf("Check after repair = %+v, %v; want nothing found", rep, err)
	}
	s2 := openStore(t, crashed)
	if s2.openScanned != 0 {
		t.Errorf("open after repair scanned %d sessions, want 0 (repair wrote a checkpoint)", s2.openScanned)
	}
	if got, err := loadIDs(t, s2, a.ID); err != nil || len(got) != 3 {
		t.Errorf("a after repair: %v, %v", got, err)
	}
}

package file

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// openJournals reports how many journal files are open, and the most that
// have been at once.
func (s *Store) openJournals() (open, peak int) {
	s.jfiles.mu.Lock()
	defer s.jfiles.mu.Unlock()
	return s.jfiles.open, s.jfiles.peak
}

// journalFDs counts this process's descriptors open on a session journal
// under dir (not on the temp folders of creates in progress). ok is false
// where /proc/self/fd cannot tell.
//
// Reading /proc/self/fd is not atomic: a descriptor listed for a journal
// that is then closed, and a journal opened meanwhile on the number of
// another listed descriptor, would both be counted. So the descriptors are
// read until two passes in a row agree, and counted then.
func journalFDs(t *testing.T, dir string) (n int, ok bool) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return 0, false
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatalf("resolve %s: %v", dir, err)
	}
	root := filepath.Join(real, "sessions") + string(filepath.Separator)
	prev, ok := journalFDTargets(root)
	for ok {
		cur, curOK := journalFDTargets(root)
		if !curOK {
			return 0, false
		}
		if maps.Equal(prev, cur) {
			return len(cur), true
		}
		prev = cur
	}
	return 0, false
}

// journalFDTargets maps this process's descriptors open on a session
// journal under root to the journal's path.
func journalFDTargets(root string) (map[string]string, bool) {
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, false
	}
	fds := map[string]string{}
	for _, de := range des {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name()))
		if err != nil || !strings.HasPrefix(target, root) {
			continue // closed meanwhile, or not ours
		}
		sid, name, found := strings.Cut(strings.TrimPrefix(target, root), string(filepath.Separator))
		if found && isSessionID(sid) && strings.HasPrefix(name, "journal-") {
			fds[de.Name()] = target
		}
	}
	return fds, true
}

// fdWatch samples the open journal descriptors under dir, by /proc and by
// the store's counter, until stopped, keeping the most seen.
type fdWatch struct {
	stop    chan struct{}
	done    chan struct{}
	maxProc atomic.Int64
	samples atomic.Int64
}

func watchFDs(t *testing.T, s *testStore, dir string) *fdWatch {
	t.Helper()
	w := &fdWatch{stop: make(chan struct{}), done: make(chan struct{})}
	if _, ok := journalFDs(t, dir); !ok {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			n, _ := journalFDs(t, dir)
			if int64(n) > w.maxProc.Load() {
				w.maxProc.Store(int64(n))
			}
			w.samples.Add(1)
		}
	}()
	return w
}

func (w *fdWatch) end() (maxProc, samples int64) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.maxProc.Load(), w.samples.Load()
}

// checkJournalBound checks, with no write in progress, that the store's
// counter is within bound and has never been above it, and that /proc shows
// exactly the journals the counter counts.
func checkJournalBound(t *testing.T, s *testStore, dir string, bound int) {
	t.Helper()
	open, peak := s.openJournals()
	if open > bound || peak > bound {
		t.Errorf("open journals %d, peak %d; bound %d", open, peak, bound)
	}
	s.jfiles.mu.Lock()
	listed := s.jfiles.lru.Len()
	s.jfiles.mu.Unlock()
	if listed != open {
		t.Errorf("%d journals in the LRU list, counter says %d open", listed, open)
	}
	if n, ok := journalFDs(t, dir); ok && n != open {
		t.Errorf("/proc/self/fd shows %d open journals under %s, the store counts %d", n, dir, open)
	}
}

// appendRounds appends to every session, round-robin, from writers
// goroutines (session i belongs to writer i%writers, so each session's
// order is known), and records what was acknowledged. Some rounds change
// a session's title instead, another journal write.
func appendRounds(t *testing.T, s *testStore, sessions []string, writers, rounds int, tag string, acked map[string][]string, mu *sync.Mutex) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				for i := w; i < len(sessions); i += writers {
					id := sessions[i]
					if (r+i)%5 == 4 {
						_, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: id},
							Fields: storage.UpdateTitle, Title: fmt.Sprintf("%s round %d", tag, r)})
						if err != nil {
							errs <- fmt.Errorf("update %s: %w", id, err)
							return
						}
						continue
					}
					m := msg(fmt.Sprintf("%s-r%d-s%d", tag, r, i), strings.Repeat("x", 100))
					if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: id},
						Messages: []*sessiondv1.Message{m}}); err != nil {
						errs <- fmt.Errorf("append to %s: %w", id, err)
						return
					}
					mu.Lock()
					acked[id] = append(acked[id], m.Id)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkAcked checks that every session holds exactly the acknowledged
// messages, in order.
func checkAcked(t *testing.T, s *testStore, acked map[string][]string) {
	t.Helper()
	for id, want := range acked {
		got, err := loadIDs(t, s, id)
		if err != nil {
			t.Fatalf("load %s: %v", id, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("session %s holds %v, acknowledged %v", id, got, want)
		}
	}
}

// TestOpenJournalsBounded: 100 sessions written round-robin by concurrent
// writers (more writers than the bound, so writers also wait for a slot)
// never have more than 8 journal files open, by the store's count and by
// /proc. Journals are closed and reopened all the time, and every
// acknowledged message is there after a crash copy and after a clean
// reopen.
func TestOpenJournalsBounded(t *testing.T) {
	const (
		bound    = 8
		sessions = 100
		writers  = 12
		rounds   = 4
	)
	dir := t.TempDir()
	s := open(t, dir, WithMaxOpenJournals(bound))

	var mu sync.Mutex
	acked := map[string][]string{}
	ids := make([]string, sessions)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < sessions; i += writers {
				se, err := s.Create(t.Context(), storage.CreateRequest{Messages: []*sessiondv1.Message{msg(fmt.Sprintf("seed-%d", i), "seed")}})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				mu.Lock()
				ids[i] = se.ID
				acked[se.ID] = []string{fmt.Sprintf("seed-%d", i)}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if open, _ := s.openJournals(); open != 0 {
		t.Errorf("%d journals open after creates only; a create opens none", open)
	}
	checkJournalBound(t, s, dir, bound)

	w := watchFDs(t, s, dir)
	appendRounds(t, s, ids, writers, rounds, "a", acked, &mu)
	maxProc, samples := w.end()
	t.Logf("first store: /proc sampled %d times, at most %d journals open", samples, maxProc)
	if maxProc > bound {
		t.Errorf("/proc/self/fd showed %d journals open under %s; bound %d", maxProc, dir, bound)
	}
	checkJournalBound(t, s, dir, bound)
	s.jfiles.mu.Lock()
	reopens := s.jfiles.reopens
	s.jfiles.mu.Unlock()
	// Every round writes every session, and only 8 stay open: nearly every
	// write opens its journal again.
	if least := int64(rounds * (sessions - bound)); reopens < least {
		t.Errorf("%d journal opens for %d rounds over %d sessions; want at least %d (are journals closed?)", reopens, rounds, sessions, least)
	}
	// A rewrite (save) closes the session's journal and starts a new one,
	// opened by the next append.
	if _, err := s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{ID: ids[0]}, Title: "saved",
		Messages: []*sessiondv1.Message{msg("saved-0", "saved")}}); err != nil {
		t.Fatalf("save: %v", err)
	}
	acked[ids[0]] = []string{"saved-0"}
	mustAppend(t, s, ids[0], msg("after-save", "x"))
	acked[ids[0]] = append(acked[ids[0]], "after-save")
	checkJournalBound(t, s, dir, bound)
	checkAcked(t, s, acked)

	// A crash now: journals were closed and reopened; everything
	// acknowledged is in the files.
	crashed := crashCopy(t, dir)
	s2 := openStore(t, crashed, WithMaxOpenJournals(bound))
	checkAcked(t, s2, acked)
	// The write-ahead log replayed at Open is retired in the background,
	// syncing journals with a descriptor of its own for a moment.
	s2.waitSealed()
	checkJournalBound(t, s2, crashed, bound)
	// The recovered store keeps the bound while written in turn (loaded
	// above, so no load reads a journal meanwhile).
	w2 := watchFDs(t, s2, crashed)
	appendRounds(t, s2, ids, writers, 2, "b", acked, &mu)
	maxProc, _ = w2.end()
	if maxProc > bound {
		t.Errorf("/proc/self/fd showed %d journals open under %s; bound %d", maxProc, crashed, bound)
	}
	checkJournalBound(t, s2, crashed, bound)
	checkAcked(t, s2, acked)
	if err := s2.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n, ok := journalFDs(t, crashed); ok && n != 0 {
		t.Errorf("%d journal files still open after Close", n)
	}
	s3 := openStore(t, crashed)
	checkAcked(t, s3, acked)
}

// TestJournalSlotWaits: with every slot held by a session being written,
// a write to another session waits for one to end, then goes ahead.
func TestJournalSlotWaits(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithMaxOpenJournals(1))
	a := mustCreate(t, s, storage.CreateRequest{})
	b := mustCreate(t, s, storage.CreateRequest{})
	mustAppend(t, s, a.ID, msg("a1", "x")) // a's journal holds the only slot
	ea := entryOf(t, s, a.ID)
	ea.wmu.Lock() // a is being written
	var unlockOnce sync.Once
	release := func() { unlockOnce.Do(func() { s.unlock(ea) }) }
	t.Cleanup(release) // before Close, which takes every open journal's lock
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: b.ID}, Messages: []*sessiondv1.Message{msg("b1", "x")}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("append to b went ahead (err %v) while a's journal held the only slot and a was being written", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("append to b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append to b still waits after a's write ended")
	}
	if _, peak := s.openJournals(); peak != 1 {
		t.Errorf("peak open journals %d, bound 1", peak)
	}
	checkJournalBound(t, s, dir, 1)
	mustAppend(t, s, a.ID, msg("a2", "x"))
	for id, want := range map[string][]string{a.ID: {"a1", "a2"}, b.ID: {"b1"}} {
		if got, err := loadIDs(t, s, id); err != nil || !slices.Equal(got, want) {
			t.Errorf("session %s holds %v (%v), want %v", id, got, err, want)
		}
	}
}

// lowestFreeFD returns the lowest descriptor number not in use: the one
// the next open gets.
func lowestFreeFD(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	n := f.Fd()
	_ = f.Close()
	return uint64(n)
}

// TestTooManyOpenFiles: with no descriptor left, writes and loads answer
// ErrTooManyOpenFiles (saying so), never data loss, and work again once
// descriptors are back, having lost nothing acknowledged.
func TestTooManyOpenFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/self/fd")
	}
	dir := t.TempDir()
	s := open(t, dir)
	old := mustCreate(t, s, storage.CreateRequest{Messages: msgs("o", 2)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	fresh := mustCreate(t, s, storage.CreateRequest{}) // loaded, journal not open yet

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = lowestFreeFD(t) // every new descriptor would be past the limit
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower the descriptor limit: %v", err)
	}
	if f, err := os.Open(os.DevNull); err == nil {
		_ = f.Close()
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
		t.Fatalf("an open still works under the descriptor limit %d", low.Cur)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatalf("restore descriptor limit: %v", err)
			}
		}
	}
	defer restore()

	_, createErr := s.Create(t.Context(), storage.CreateRequest{})
	_, appendErr := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: fresh.ID}, Messages: []*sessiondv1.Message{msg("lost", "x")}})
	_, _, loadErr := s.Load(t.Context(), storage.Ref{ID: old.ID}, storage.LoadOptions{})
	_, openErr := Open(t.Context(), t.TempDir())
	restore()
	t.Logf("Create with no descriptor left: %v", createErr)

	for _, c := range []struct {
		op  string
		err error
	}{{"Create", createErr}, {"Append", appendErr}, {"Load", loadErr}, {"Open", openErr}} {
		if !errors.Is(c.err, ErrTooManyOpenFiles) || !strings.Contains(c.err.Error(), "too many open files") {
			t.Errorf("%s with no descriptor left: %v; want ErrTooManyOpenFiles", c.op, c.err)
		}
		if errors.Is(c.err, storage.ErrDataLoss) {
			t.Errorf("%s with no descriptor left answers data loss: %v", c.op, c.err)
		}
	}
	// Nothing was written, nothing is marked damaged.
	mustAppend(t, s, fresh.ID, msg("kept", "x"))
	if got, err := loadIDs(t, s, fresh.ID); err != nil || !slices.Equal(got, []string{"kept"}) {
		t.Errorf("session %s holds %v (%v), want [kept]", fresh.ID, got, err)
	}
	if got, err := loadIDs(t, s, old.ID); err != nil || !slices.Equal(got, []string{"o0", "o1"}) {
		t.Errorf("session %s holds %v (%v), want [o0 o1]", old.ID, got, err)
	}
	se, err := s.Get(t.Context(), storage.Ref{ID: fresh.ID})
	if err != nil || se.Revision != 2 {
		t.Errorf("session %s: %+v, %v; want revision 2", fresh.ID, se, err)
	}
}

// waitSealed waits until the sealer has retired every segment queued.
func (s *Store) waitSealed() {
	w := &s.wal
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	for len(w.pending) > 0 {
		w.sealCond.Wait()
	}
}

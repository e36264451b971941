package storage

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

const testSession = "0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b"

func ev(typ EventType, rev uint64) Event {
	return Event{Type: typ, Revision: rev, Session: &Session{ID: testSession, Revision: rev}}
}

// publishRange publishes EventAppended for revisions from..to.
func publishRange(b *Broker, id string, from, to uint64) {
	for r := from; r <= to; r++ {
		b.Publish(id, ev(EventAppended, r))
	}
}

// recv returns the next event or fails.
func recv(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e, ok := <-s.Events():
		if !ok {
			t.Fatalf("subscription ended (%v), want an event", s.Err())
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	panic("unreachable")
}

// wantRevisions reads len(revs) events and checks their revisions, then
// checks that nothing else is waiting.
func wantRevisions(t *testing.T, s *Subscription, revs ...uint64) {
	t.Helper()
	for _, r := range revs {
		if e := recv(t, s); e.Revision != r {
			t.Fatalf("got revision %d, want %d", e.Revision, r)
		}
	}
	select {
	case e, ok := <-s.Events():
		t.Fatalf("got extra event %+v (open %v)", e, ok)
	default:
	}
}

// wantEnd drains the subscription and checks why it ended.
func wantEnd(t *testing.T, s *Subscription, want error) int {
	t.Helper()
	n := 0
	for range s.Events() {
		n++
	}
	if err := s.Err(); want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("subscription ended with %v, want %v", err, want)
	}
	return n
}

func mustSubscribe(t *testing.T, b *Broker, current, from uint64) *Subscription {
	t.Helper()
	return mustSubscribeID(t, b, testSession, current, from)
}

func TestBrokerFromNow(t *testing.T) {
	b := NewBroker()
	s := mustSubscribe(t, b, 3, 0)
	other := "0190b5a4-7f2e-7c3d-8a1b-000000000000"
	b.Publish(other, ev(EventAppended, 9)) // another session: not delivered
	publishRange(b, testSession, 4, 6)
	wantRevisions(t, s, 4, 5, 6)
	// from == current is "from now" too.
	s2 := mustSubscribe(t, b, 6, 6)
	publishRange(b, testSession, 7, 7)
	wantRevisions(t, s, 7)
	wantRevisions(t, s2, 7)
}

func TestBrokerReplay(t *testing.T) {
	b := NewBroker()
	first := mustSubscribe(t, b, 1, 0) // history is kept from here on
	publishRange(b, testSession, 2, 5)
	late := mustSubscribe(t, b, 5, 2)
	wantRevisions(t, late, 3, 4, 5)
	all := mustSubscribe(t, b, 5, 1)
	wantRevisions(t, all, 2, 3, 4, 5)
	publishRange(b, testSession, 6, 6)
	wantRevisions(t, late, 6)
	wantRevisions(t, first, 2, 3, 4, 5, 6)
	// History survives the last subscriber leaving.
	for _, s := range []*Subscription{first, late, all} {
		s.Close()
	}
	publishRange(b, testSession, 7, 7)
	again := mustSubscribe(t, b, 7, 5)
	wantRevisions(t, again, 6, 7)
}

func TestBrokerReset(t *testing.T) {
	t.Run("future", func(t *testing.T) {
		b := NewBroker()
		_, err := b.Subscribe(testSession, 3, 4)
		if !errors.Is(err, ErrWatchReset) {
			t.Errorf("Subscribe from the future: %v, want ErrWatchReset", err)
		}
	})
	t.Run("never watched", func(t *testing.T) {
		b := NewBroker()
		publishRange(b, testSession, 2, 5) // nobody watched: no history
		_, err := b.Subscribe(testSession, 5, 3)
		if !errors.Is(err, ErrWatchReset) {
			t.Errorf("Subscribe from the past of an unwatched session: %v, want ErrWatchReset", err)
		}
		// The refused watcher reloads (revision 5) and, before it
		// subscribes again, another write lands: history kept since the
		// refusal replays it.
		publishRange(b, testSession, 6, 6)
		s := mustSubscribe(t, b, 6, 5)
		wantRevisions(t, s, 6)
	})
	t.Run("older than the history", func(t *testing.T) {
		b := NewBroker()
		mustSubscribe(t, b, 1, 0)
		last := uint64(1 + WatchHistory + 10)
		publishRange(b, testSession, 2, last)
		oldest := last - WatchHistory + 1 // the oldest event kept
		if _, err := b.Subscribe(testSession, last, oldest-2); !errors.Is(err, ErrWatchReset) {
			t.Errorf("Subscribe from before the history: %v, want ErrWatchReset", err)
		}
		s := mustSubscribe(t, b, last, oldest-1)
		if n := len(s.Events()); n != WatchHistory {
			t.Errorf("replay of the whole history queued %d events, want %d", n, WatchHistory)
		}
		for r := oldest; r <= last; r++ {
			if e := recv(t, s); e.Revision != r {
				t.Fatalf("replayed revision %d, want %d", e.Revision, r)
			}
		}
	})
	t.Run("history behind the session", func(t *testing.T) {
		// The backend says the session is at 9 but the broker saw only up
		// to 5 (say, changes made while another replica wrote): replaying
		// would leave a gap, so the watcher must reload.
		b := NewBroker()
		mustSubscribe(t, b, 1, 0)
		publishRange(b, testSession, 2, 5)
		if _, err := b.Subscribe(testSession, 9, 3); !errors.Is(err, ErrWatchReset) {
			t.Errorf("Subscribe with a gap after the history: %v, want ErrWatchReset", err)
		}
	})
	t.Run("fell behind", func(t *testing.T) {
		b := NewBroker()
		slow := mustSubscribe(t, b, 1, 0)
		fast := mustSubscribe(t, b, 1, 0)
		done := make(chan struct{})
		var got []uint64
		go func() {
			defer close(done)
			for e := range fast.Events() {
				got = append(got, e.Revision)
			}
		}()
		// Publish never blocks, although slow never reads.
		published := make(chan struct{})
		go func() {
			for r := uint64(2); r <= WatchBuffer+10; r++ {
				b.Publish(testSession, ev(EventAppended, r))
				if r%16 == 0 {
					time.Sleep(time.Millisecond) // let the fast reader keep up
				}
			}
			close(published)
		}()
		select {
		case <-published:
		case <-time.After(10 * time.Second):
			t.Fatal("Publish blocked on a watcher that does not read")
		}
		if n := wantEnd(t, slow, ErrWatchReset); n != WatchBuffer {
			t.Errorf("slow watcher had %d events before the reset, want %d", n, WatchBuffer)
		}
		fast.Close()
		<-done
		if len(got) != WatchBuffer+9 || got[0] != 2 || got[len(got)-1] != WatchBuffer+10 {
			t.Errorf("fast watcher got %d events (%v...), want all %d", len(got), got[:min(3, len(got))], WatchBuffer+9)
		}
	})
}

func TestBrokerDeleted(t *testing.T) {
	b := NewBroker()
	s1 := mustSubscribe(t, b, 1, 0)
	s2 := mustSubscribe(t, b, 1, 0)
	publishRange(b, testSession, 2, 3)
	b.Publish(testSession, ev(EventDeleted, 4))
	for _, s := range []*Subscription{s1, s2} {
		for _, want := range []Event{ev(EventAppended, 2), ev(EventAppended, 3), ev(EventDeleted, 4)} {
			if e := recv(t, s); e.Type != want.Type || e.Revision != want.Revision {
				t.Fatalf("got %v at %d, want %v at %d", e.Type, e.Revision, want.Type, want.Revision)
			}
		}
		if n := wantEnd(t, s, nil); n != 0 {
			t.Errorf("%d events after EventDeleted", n)
		}
	}
	// The history went with the session: an id reused later starts afresh.
	if _, err := b.Subscribe(testSession, 3, 1); !errors.Is(err, ErrWatchReset) {
		t.Errorf("Subscribe into a deleted session's past: %v, want ErrWatchReset", err)
	}
}

func TestBrokerClose(t *testing.T) {
	b := NewBroker()
	s1 := mustSubscribe(t, b, 1, 0)
	s2 := mustSubscribe(t, b, 5, 0)
	closed := mustSubscribe(t, b, 1, 0)
	closed.Close()
	closed.Close() // twice is fine
	wantEnd(t, closed, nil)
	publishRange(b, testSession, 2, 2)
	b.Close()
	if n := wantEnd(t, s1, ErrClosed); n != 1 {
		t.Errorf("s1 got %d events before the close, want 1", n)
	}
	wantEnd(t, s2, ErrClosed)
	if _, err := b.Subscribe(testSession, 2, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	b.Publish(testSession, ev(EventAppended, 3)) // no panic, nobody to tell
	s1.Close()                                   // after the broker closed: still fine
	b.Close()
}

// TestBrokerConcurrent exercises the broker's locking under -race: one
// publisher per session, subscribers coming and going.
func TestBrokerConcurrent(t *testing.T) {
	b := NewBroker()
	ids := []string{testSession, "0190b5a4-7f2e-7c3d-8a1b-000000000001", "0190b5a4-7f2e-7c3d-8a1b-000000000002"}
	var mu sync.Mutex // per-session revisions, as a backend's session lock would keep them
	rev := map[string]uint64{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for range 300 {
				mu.Lock()
				rev[id]++
				b.Publish(id, ev(EventAppended, rev[id]))
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for range 50 {
				mu.Lock()
				s, err := b.Subscribe(id, rev[id], 0)
				mu.Unlock()
				if err != nil {
					t.Errorf("Subscribe: %v", err)
					return
				}
				last := uint64(0)
				for range 5 {
					select {
					case e, ok := <-s.Events():
						if ok && last != 0 && e.Revision != last+1 {
							t.Errorf("session %s: revision %d after %d", id, e.Revision, last)
						}
						last = e.Revision
					case <-time.After(time.Millisecond):
					}
				}
				s.Close()
			}
		})
	}
	wg.Wait()
	b.Close()
}

func TestBrokerHistoryBytes(t *testing.T) {
	b := NewBroker()
	watcher := mustSubscribe(t, b, 1, 0)
	defer watcher.Close()
	big := strings.Repeat("x", WatchHistoryBytes/3)
	for r := uint64(2); r <= 6; r++ {
		e := ev(EventAppended, r)
		e.Messages = []*sessiondv1.Message{{Id: fmt.Sprint(r), Role: sessiondv1.Role_ROLE_USER, Content: big}}
		b.Publish(testSession, e)
	}
	// Only the newest two appends fit under the byte bound: resuming from
	// revision 4 replays 5 and 6, from 3 must reload.
	s := mustSubscribe(t, b, 6, 4)
	wantRevisions(t, s, 5, 6)
	s.Close()
	if _, err := b.Subscribe(testSession, 6, 3); !errors.Is(err, ErrWatchReset) {
		t.Errorf("Subscribe from beyond the byte-bounded history: %v, want ErrWatchReset", err)
	}
	// One event bigger than the bound is still kept: it is the newest.
	e := ev(EventAppended, 7)
	e.Messages = []*sessiondv1.Message{{Id: "7", Role: sessiondv1.Role_ROLE_USER, Content: big + big + big + big}}
	b.Publish(testSession, e)
	s = mustSubscribe(t, b, 7, 6)
	wantRevisions(t, s, 7)
	s.Close()
}

// TestBrokerHistoryTotal checks the daemon-wide bound: sessions watched once
// and left give their history up first, oldest first, and a watch resuming
// from released history must reload.
func TestBrokerHistoryTotal(t *testing.T) {
	b := NewBroker(WithHistoryTotal(WatchHistoryBytes))
	chunk := strings.Repeat("y", WatchHistoryBytes/8)
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("0190b5a4-7f2e-7c3d-8a1b-%012d", i)
		s, err := b.Subscribe(ids[i], 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // watched once, then left
		e := ev(EventAppended, 2)
		e.Messages = []*sessiondv1.Message{{Id: "m", Role: sessiondv1.Role_ROLE_USER, Content: chunk}}
		b.Publish(ids[i], e)
		if got := historyBytes(b); got > WatchHistoryBytes {
			t.Fatalf("after %d sessions the history holds %d bytes, over the %d budget", i+1, got, WatchHistoryBytes)
		}
	}
	if _, err := b.Subscribe(ids[0], 2, 1); !errors.Is(err, ErrWatchReset) {
		t.Errorf("resume the least recently used session: %v, want ErrWatchReset", err)
	}
	s := mustSubscribeID(t, b, ids[len(ids)-1], 2, 1)
	wantRevisions(t, s, 2)
	s.Close()

	// A watched session keeps its newest event even when others must go.
	w := mustSubscribeID(t, b, ids[1], 2, 0)
	defer w.Close()
	for i := 2; i < len(ids); i++ {
		e := ev(EventAppended, 3)
		e.Messages = []*sessiondv1.Message{{Id: "n", Role: sessiondv1.Role_ROLE_USER, Content: chunk}}
		b.Publish(ids[i], e)
	}
	e := ev(EventAppended, 3)
	e.Messages = []*sessiondv1.Message{{Id: "n", Role: sessiondv1.Role_ROLE_USER, Content: chunk}}
	b.Publish(ids[1], e)
	wantRevisions(t, w, 3)
	s = mustSubscribeID(t, b, ids[1], 3, 2)
	wantRevisions(t, s, 3)
	s.Close()
	if got := historyBytes(b); got > WatchHistoryBytes {
		t.Errorf("history holds %d bytes, over the %d budget", got, WatchHistoryBytes)
	}
	// Deleting releases everything the session kept.
	before := historyBytes(b)
	b.Publish(ids[1], ev(EventDeleted, 4))
	if got := historyBytes(b); got >= before {
		t.Errorf("history after a delete: %d bytes, want less than %d", got, before)
	}
}

// TestBrokerHistoryHeap measures, in one run, the heap that 40 sessions of
// 4 MiB each keep after each was watched once and left: with the
// daemon-wide bound it stays near DefaultWatchHistoryTotal (it was the whole
// 160 MiB, as every watched session kept up to WatchHistoryBytes forever).
func TestBrokerHistoryHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 160 MiB")
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	b := NewBroker()
	base := heap()
	for i := range 40 {
		id := fmt.Sprintf("0190b5a4-7f2e-7c3d-8a1b-%012d", i)
		s, err := b.Subscribe(id, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		for r := uint64(2); r <= 5; r++ {
			e := ev(EventAppended, r)
			e.Messages = []*sessiondv1.Message{{Id: fmt.Sprint(r), Role: sessiondv1.Role_ROLE_USER, Content: strings.Repeat("z", 1<<20)}}
			b.Publish(id, e)
		}
	}
	delta := heap() - base
	t.Logf("heap kept by the history of 40 x 4 MiB sessions: %d MiB (budget %d MiB)", delta>>20, DefaultWatchHistoryTotal>>20)
	if limit := int64(DefaultWatchHistoryTotal + 8<<20); delta > limit {
		t.Errorf("history keeps %d MiB of heap, want at most %d MiB", delta>>20, limit>>20)
	}
	runtime.KeepAlive(b)
}

func mustSubscribeID(t *testing.T, b *Broker, id string, current, from uint64) *Subscription {
	t.Helper()
	s, err := b.Subscribe(id, current, from)
	if err != nil {
		t.Fatalf("Subscribe(%s, %d, %d): %v", id, current, from, err)
	}
	return s
}

// TestBrokerHistoryAppendAllocs: once a watched session's history is full,
// keeping one more event (and dropping the oldest) allocates nothing on
// most publishes: it does not copy the history each time.
func TestBrokerHistoryAppendAllocs(t *testing.T) {
	b := NewBroker()
	mustSubscribeID(t, b, testSession, 1, 0).Close() // watched once: history is kept
	publishRange(b, testSession, 2, 2*WatchHistory)
	rev := uint64(2 * WatchHistory)
	e := ev(EventAppended, 0)
	allocs := testing.AllocsPerRun(10*WatchHistory, func() {
		rev++
		e.Revision = rev
		b.Publish(testSession, e)
	})
	if allocs > 0.1 {
		t.Errorf("%.2f allocations per publish to a full history, want about none", allocs)
	}
	b.mu.Lock()
	h := b.history[testSession]
	n, first, last := len(h.events), h.events[0].Revision, h.events[len(h.events)-1].Revision
	b.mu.Unlock()
	if n != WatchHistory || last != rev || first != rev-WatchHistory+1 {
		t.Errorf("history holds %d events, revisions %d..%d; want %d, %d..%d", n, first, last, WatchHistory, rev-WatchHistory+1, rev)
	}
}

// PublishBuilt builds an event only for a session that is watched, or that
// keeps history for watchers to resume from, and delivers it as Publish does.
func TestPublishBuiltOnlyForWatchedSessions(t *testing.T) {
	b := NewBroker()
	builds := 0
	publish := func(rev uint64) {
		b.PublishBuilt(testSession, func() Event { builds++; return ev(EventAppended, rev) })
	}
	publish(1)
	if builds != 0 {
		t.Fatalf("built %d events for a session nobody watches, want 0", builds)
	}
	s, err := b.Subscribe(testSession, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	publish(2)
	if builds != 1 {
		t.Fatalf("built %d events for a watched session, want 1", builds)
	}
	if got := recv(t, s); got.Revision != 2 {
		t.Fatalf("watcher got revision %d, want 2", got.Revision)
	}
	s.Close()
	publish(3) // no subscriber left, but the history is kept for resuming
	if builds != 2 {
		t.Fatalf("built %d events after the watcher left, want 2 (history)", builds)
	}
	again, err := b.Subscribe(testSession, 3, 2)
	if err != nil {
		t.Fatalf("resuming from revision 2: %v", err)
	}
	if got := recv(t, again); got.Revision != 3 {
		t.Fatalf("resumed watcher got revision %d, want 3", got.Revision)
	}
	again.Close()
}

// historyBytes returns what b's kept history costs now, in bytes (as counted
// against WithHistoryTotal).
func historyBytes(b *Broker) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// TestBrokerRoom: Room is the least room of a session's subscribers, a
// whole buffer without any, and grows as the slowest one takes events.
func TestBrokerRoom(t *testing.T) {
	b := NewBroker()
	if got := b.Room(testSession); got != WatchBuffer {
		t.Fatalf("Room with no subscriber = %d, want %d", got, WatchBuffer)
	}
	slow := mustSubscribe(t, b, 1, 0)
	fast := mustSubscribe(t, b, 1, 0)
	publishRange(b, testSession, 2, 11)
	wantRevisions(t, fast, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	if got := b.Room(testSession); got != WatchBuffer-10 {
		t.Fatalf("Room with a subscriber 10 events behind = %d, want %d", got, WatchBuffer-10)
	}
	for _, want := range []uint64{2, 3, 4} {
		if e := recv(t, slow); e.Revision != want {
			t.Fatalf("slow watcher got revision %d, want %d", e.Revision, want)
		}
	}
	if got := b.Room(testSession); got != WatchBuffer-7 {
		t.Fatalf("Room after the slowest took 3 = %d, want %d", got, WatchBuffer-7)
	}
	if got := b.Room("other"); got != WatchBuffer {
		t.Fatalf("Room of another session = %d, want %d", got, WatchBuffer)
	}
	// A reader holding what it took in a queue of its own still has it to
	// deliver.
	queued := 200
	fast.SetBacklog(func() int { return queued })
	if got := b.Room(testSession); got != WatchBuffer-200 {
		t.Fatalf("Room with a reader 200 events behind in its own queue = %d, want %d", got, WatchBuffer-200)
	}
	queued = WatchBuffer
	if got := b.Room(testSession); got != 0 {
		t.Fatalf("Room with a reader's queue full = %d, want 0", got)
	}
}

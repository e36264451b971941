package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// eventWait bounds every wait for an event; an event that is due arrives in
// far less.
const eventWait = 10 * time.Second

// nextEvent returns the subscription's next event, failing the test if the
// subscription ends or nothing arrives in time.
func nextEvent(t *testing.T, sub *storage.Subscription) storage.Event {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		if !ok {
			t.Fatalf("subscription ended (%v), want another event", sub.Err())
		}
		return ev
	case <-time.After(eventWait):
		t.Fatalf("no event within %v", eventWait)
	}
	panic("unreachable")
}

// checkEnded waits for the subscription to end with no further event, and
// checks why it ended: want nil means cleanly.
func checkEnded(t *testing.T, what string, sub *storage.Subscription, want error) {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		if ok {
			t.Errorf("%s: got event %v at revision %d, want the subscription to end", what, ev.Type, ev.Revision)
			return
		}
	case <-time.After(eventWait):
		t.Errorf("%s: subscription did not end within %v", what, eventWait)
		return
	}
	if err := sub.Err(); want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("%s: subscription ended with %v, want %v", what, err, want)
	}
}

// checkQuiet checks that no event is waiting.
func checkQuiet(t *testing.T, what string, sub *storage.Subscription) {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		t.Errorf("%s: got event %v at revision %d (open %v), want none", what, ev.Type, ev.Revision, ok)
	default:
	}
}

func watch(t *testing.T, s *storage.Store, ref storage.Ref, from uint64) *storage.Subscription {
	t.Helper()
	sub, err := s.Watch(t.Context(), ref, from)
	if err != nil {
		t.Fatalf("Watch(%+v, %d): %v", ref, from, err)
	}
	t.Cleanup(sub.Close)
	return sub
}

func checkEvent(t *testing.T, s *storage.Store, ev storage.Event, typ storage.EventType, rev uint64) {
	t.Helper()
	if ev.Type != typ || ev.Revision != rev {
		t.Fatalf("got event %v at revision %d, want %v at %d", ev.Type, ev.Revision, typ, rev)
	}
	if ev.Session == nil || ev.Session.Revision != rev {
		t.Errorf("event %v at %d carries session %+v, want its metadata at revision %d", typ, rev, ev.Session, rev)
	}
	if typ != storage.EventAppended && typ != storage.EventFinished && len(ev.Messages) != 0 {
		t.Errorf("event %v carries %d messages, want none", typ, len(ev.Messages))
	}
}

func testWatch(t *testing.T, h *harness) {
	t.Run("FromNow", func(t *testing.T) {
		s := h.open(t)
		se := create(t, s, storage.CreateRequest{Namespace: nsA, Alias: "w", Messages: msgs("seed", 1)})
		other := create(t, s, storage.CreateRequest{Namespace: nsA})
		ref := storage.Ref{Namespace: nsA, ID: se.ID}
		sub := watch(t, s, storage.Ref{Namespace: nsA, Alias: "w"}, 0)
		checkQuiet(t, "a new watch", sub)

		appendMsgs(t, s, storage.Ref{Namespace: nsA, ID: other.ID}, msg("elsewhere", "x"))
		sent := []*sessiondv1.Message{msg("a", "one"), {Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "no id"}}
		appendMsgs(t, s, ref, sent...)
		ev := nextEvent(t, sub)
		checkEvent(t, s, ev, storage.EventAppended, 2)
		loaded, ms := loadAll(t, s, ref)
		if d := cmpMsgs(ms[1:], ev.Messages); d != "" {
			t.Errorf("appended event's messages differ from the stored ones (-stored +event):\n%s", d)
		}
		if d := diffSession(loaded, ev.Session); d != "" {
			t.Errorf("appended event's session (-get +event):\n%s", d)
		}
		// A no-op (a retried append) notifies nobody: the next event is the save's.
		appendMsgs(t, s, ref, ms[1:]...)
		_, err := s.Save(t.Context(), storage.SaveRequest{Ref: ref, Title: "saved", Messages: msgs("s", 4)})
		must(t, "Save", err)
		ev = nextEvent(t, sub)
		checkEvent(t, s, ev, storage.EventReplaced, 3)
		if ev.Session.Title != "saved" || ev.Session.MessageCount != 4 {
			t.Errorf("replaced event's session %+v, want the saved title and 4 messages", ev.Session)
		}
		_, err = s.Rewind(t.Context(), storage.RewindRequest{Ref: ref, MessageCount: 1})
		must(t, "Rewind", err)
		ev = nextEvent(t, sub)
		checkEvent(t, s, ev, storage.EventReplaced, 4)
		if ev.Session.MessageCount != 1 {
			t.Errorf("rewind event's session has %d messages, want 1", ev.Session.MessageCount)
		}
		_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateAlias | storage.UpdateSummary, Alias: "renamed", Summary: "sum"})
		must(t, "Update", err)
		ev = nextEvent(t, sub)
		checkEvent(t, s, ev, storage.EventUpdated, 5)
		if ev.Session.Alias != "renamed" || ev.Session.Summary != "sum" {
			t.Errorf("updated event's session %+v, want the new alias and summary", ev.Session)
		}
		// Forking reads the source; it does not change it.
		_, err = s.Fork(t.Context(), storage.ForkRequest{Ref: ref})
		must(t, "Fork", err)
		checkQuiet(t, "after a fork of the watched session", sub)
		must(t, "Delete", s.Delete(t.Context(), ref, 0))
		ev = nextEvent(t, sub)
		if ev.Type != storage.EventDeleted {
			t.Fatalf("got event %v after Delete, want EventDeleted", ev.Type)
		}
		checkEnded(t, "after EventDeleted", sub, nil)

		_, err = s.Watch(t.Context(), ref, 0)
		wantErr(t, "Watch of a deleted session", err, storage.ErrNotFound)
	})

	t.Run("Replay", func(t *testing.T) {
		s := h.open(t)
		se, ref := createRef(t, s, storage.CreateRequest{})
		// History is kept for watched sessions: start watching first.
		first := watch(t, s, ref, 0)
		for i := range 3 {
			appendMsgs(t, s, ref, msg(fmt.Sprintf("m%d", i), "x"))
		}
		for rev := uint64(2); rev <= 4; rev++ {
			checkEvent(t, s, nextEvent(t, first), storage.EventAppended, rev)
		}
		// From revision 2: the changes after it, 3 and 4, then what follows.
		late := watch(t, s, ref, 2)
		for rev, id := uint64(3), 1; rev <= 4; rev, id = rev+1, id+1 {
			ev := nextEvent(t, late)
			checkEvent(t, s, ev, storage.EventAppended, rev)
			if len(ev.Messages) != 1 || ev.Messages[0].GetId() != fmt.Sprintf("m%d", id) {
				t.Errorf("replayed event %d carries %v, want [m%d]", rev, ids(ev.Messages), id)
			}
		}
		checkQuiet(t, "after the replay", late)
		// From the current revision: nothing to replay.
		current := watch(t, s, ref, 4)
		checkQuiet(t, "a watch from the current revision", current)
		_, err := s.Update(t.Context(), storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle, Title: "t"})
		must(t, "Update", err)
		for _, sub := range []*storage.Subscription{first, late, current} {
			checkEvent(t, s, nextEvent(t, sub), storage.EventUpdated, 5)
		}
		// A revision the session has not reached: reload first.
		_, err = s.Watch(t.Context(), ref, 6)
		wantErr(t, "Watch from a future revision", err, storage.ErrWatchReset)
		_, err = s.Watch(t.Context(), storage.Ref{ID: uuid.NewString()}, 0)
		wantErr(t, "Watch of a missing session", err, storage.ErrNotFound)
		_, err = s.Watch(t.Context(), storage.Ref{Namespace: nsA, ID: se.ID}, 0)
		wantErr(t, "Watch of the id in another namespace", err, storage.ErrNotFound)
		_, err = s.Watch(t.Context(), storage.Ref{Alias: "a/b"}, 0)
		wantErr(t, "Watch of a malformed alias", err, storage.ErrInvalid)
	})

	t.Run("SlowWatcher", func(t *testing.T) {
		// A watcher that never reads is cut off once WatchBuffer events wait
		// for it; writers never block on it, and a watcher that keeps up
		// gets everything.
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{})
		slow := watch(t, s, ref, 0)
		fast := watch(t, s, ref, 0)
		const writers, each = 4, storage.WatchBuffer/4 + 2
		const total = writers * each
		// The fast watcher keeps up: writers wait while it is more than
		// half the kept history behind (a scheduler may starve it). Not
		// more: a backend that feeds watchers from its stored history
		// (PostgreSQL's events table) resets a watcher that falls past it,
		// and the writers can each add one more append before they wait.
		var appended, seen atomic.Int64
		keepUp := func() {
			for deadline := time.Now().Add(eventWait); appended.Load()-seen.Load() > storage.WatchHistory/2 && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
		fastDone := make(chan error, 1)
		go func() {
			next := uint64(2)
			for ev := range fast.Events() {
				seen.Add(1)
				if ev.Revision != next {
					fastDone <- fmt.Errorf("fast watcher got revision %d, want %d", ev.Revision, next)
					return
				}
				if next++; next == total+2 {
					fastDone <- nil
					return
				}
			}
			fastDone <- fmt.Errorf("fast watcher ended at revision %d: %w", next, fast.Err())
		}()
		writesDone := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, total)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					_, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg(fmt.Sprintf("w%d-%d", w, i), "x")}})
					if err != nil {
						errs <- err
						return
					}
					appended.Add(1)
					keepUp()
				}
			})
		}
		go func() { wg.Wait(); close(writesDone) }()
		select {
		case <-writesDone:
		case <-time.After(60 * time.Second):
			select {
			case err := <-fastDone:
				t.Fatalf("%d appends did not finish in 60 s; the fast watcher ended: %v", total, err)
			default:
				t.Fatalf("%d appends did not finish in 60 s: is a writer blocked by a watcher that does not read?", total)
			}
		}
		close(errs)
		for err := range errs {
			t.Errorf("Append: %v", err)
		}
		select {
		case err := <-fastDone:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(eventWait):
			t.Errorf("fast watcher did not see all %d events", total)
		}
		got := 0
		for ev := range slow.Events() {
			got++
			if ev.Revision != uint64(got+1) {
				t.Errorf("slow watcher's event %d has revision %d, want %d", got, ev.Revision, got+1)
			}
		}
		if got > storage.WatchBuffer || !errors.Is(slow.Err(), storage.ErrWatchReset) {
			t.Errorf("slow watcher got %d events then %v; want at most %d, then ErrWatchReset", got, slow.Err(), storage.WatchBuffer)
		}
	})

	t.Run("SubscriptionClose", func(t *testing.T) {
		s := h.open(t)
		_, ref := createRef(t, s, storage.CreateRequest{})
		sub := watch(t, s, ref, 0)
		sub.Close()
		checkEnded(t, "closed subscription", sub, nil)
		sub.Close()
		appendMsgs(t, s, ref, msg("after", "x"))
	})

	t.Run("StoreClose", func(t *testing.T) {
		s := h.openUnchecked(t)
		se := create(t, s, storage.CreateRequest{})
		sub, err := s.Watch(t.Context(), storage.Ref{ID: se.ID}, 0)
		must(t, "Watch", err)
		must(t, "Close", s.Close())
		checkEnded(t, "subscription when the store closed", sub, storage.ErrClosed)
	})
}

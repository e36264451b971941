package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// eventRows counts session id's rows in the events table.
func eventRows(t *testing.T, dsn, id string) int {
	t.Helper()
	var n int
	if err := connect(t, dsn).QueryRow(t.Context(), `SELECT count(*) FROM events WHERE session_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// openHeld opens a Store on dsn for a watcher that tests hold back
// (postgres.HoldWatcher on d): it reads only when notified, never by poll.
func openHeld(t *testing.T, dsn string) (d *postgres.Store, s *storage.Store) {
	t.Helper()
	d, s, err := postgres.OpenDriver(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return d, s
}

// openSilent opens a Store on dsn whose writes send no notification, as
// though each were lost: only a watcher's poll finds them.
func openSilent(t testing.TB, dsn string) *storage.Store {
	t.Helper()
	d, s, err := postgres.OpenDriver(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	postgres.StopNotifier(d)
	return s
}

// openPolling opens a Store on dsn whose watcher polls every poll.
func openPolling(t testing.TB, dsn string, poll time.Duration) (d *postgres.Store, s *storage.Store) {
	t.Helper()
	d, s, err := postgres.OpenDriver(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1, PollInterval: poll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return d, s
}

// TestWatchAppendsWithoutEventRows: an append that changes only the
// revision, count and update time writes no events row, and a watcher on
// another replica that falls far behind (past the events history) still
// reads every append, with the session as Get answered after it, in order.
func TestWatchAppendsWithoutEventRows(t *testing.T) {
	dsn := pgtest.Schema(t)
	writer := open(t, dsn)
	d, watching := openHeld(t, dsn)
	ctx := t.Context()
	se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	sub, err := watching.Watch(ctx, ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	const appends = 3 * storage.WatchHistory
	release := postgres.HoldWatcher(d)
	var sessions []*storage.Session
	for i := range appends {
		msgs := []*sessiondv1.Message{{Id: fmt.Sprintf("m%d", i), Role: sessiondv1.Role_ROLE_USER, Content: "x"}}
		if i%2 == 1 {
			msgs = append(msgs, &sessiondv1.Message{Id: fmt.Sprintf("m%d-2", i), Role: sessiondv1.Role_ROLE_USER, Content: "y"})
		}
		if _, err := writer.Append(ctx, storage.AppendRequest{Ref: ref, Messages: msgs}); err != nil {
			release()
			t.Fatal(err)
		}
		got, err := writer.Get(ctx, ref)
		if err != nil {
			release()
			t.Fatal(err)
		}
		sessions = append(sessions, got)
	}
	release()
	if n := eventRows(t, dsn, se.ID); n != 1 {
		t.Errorf("%d events rows after %d appends, want 1 (the create's)", n, appends)
	}
	for i, want := range sessions {
		ev := nextEvent(t, sub)
		if ev.Type != storage.EventAppended || ev.Revision != want.Revision {
			t.Fatalf("event %d: %v at revision %d, want an append at %d", i, ev.Type, ev.Revision, want.Revision)
		}
		if !ev.Session.UpdatedAt.Equal(want.UpdatedAt) || ev.Session.MessageCount != want.MessageCount || ev.Session.Title != "t" ||
			ev.Session.ID != se.ID || !ev.Session.CreatedAt.Equal(want.CreatedAt) {
			t.Fatalf("event %d's session %+v, want %+v", i, ev.Session, want)
		}
		if wantN := 1 + i%2; len(ev.Messages) != wantN || ev.Messages[0].GetId() != fmt.Sprintf("m%d", i) {
			t.Fatalf("event %d carries %d messages (first %q), want %d from m%d", i, len(ev.Messages), ev.Messages[0].GetId(), wantN, i)
		}
	}

	// A resume keeps the history's bound.
	last := sessions[len(sessions)-1].Revision
	if _, err := watching.Watch(ctx, ref, last-storage.WatchHistory-1); err == nil {
		t.Errorf("Watch from %d revisions back succeeded, want ErrWatchReset", storage.WatchHistory+1)
	}
	late, err := watching.Watch(ctx, ref, last-storage.WatchHistory)
	if err != nil {
		t.Fatalf("Watch from %d revisions back: %v", storage.WatchHistory, err)
	}
	defer late.Close()
	if ev := nextEvent(t, late); ev.Revision != last-storage.WatchHistory+1 || ev.Session.Title != "t" {
		t.Errorf("resumed watch starts with revision %d (title %q), want %d", ev.Revision, ev.Session.Title, last-storage.WatchHistory+1)
	}
}

// TestWatchRewindOfAppendsWithoutRows: a rewind past appends that wrote no
// events row keeps those in the history as rows, so a replay delivers
// what each added; an older one that the rewind cuts in two resets a
// watcher that still needs it rather than delivering half of it.
func TestWatchRewindOfAppendsWithoutRows(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	// Titled: an append to an untitled session titles it, and so writes
	// its row.
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	two := func(i int) []*sessiondv1.Message {
		return []*sessiondv1.Message{{Id: fmt.Sprintf("a%d", i), Role: sessiondv1.Role_ROLE_USER, Content: "x"},
			{Id: fmt.Sprintf("b%d", i), Role: sessiondv1.Role_ROLE_USER, Content: "y"}}
	}
	// Revisions 2 .. WatchHistory+11, two messages each.
	const appends = storage.WatchHistory + 10
	for i := range appends {
		if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: two(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Keep the first message of the append at revision 3, outside the
	// history, and of the last append inside it.
	rewound, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref, MessageCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := s.Watch(ctx, ref, rewound.Revision-storage.WatchHistory)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for rev := rewound.Revision - storage.WatchHistory + 1; rev < rewound.Revision; rev++ {
		ev := nextEvent(t, sub)
		i := int(rev) - 2
		if ev.Revision != rev || ev.Type != storage.EventAppended || len(ev.Messages) != 2 {
			t.Fatalf("replayed revision %d: %v at %d with %d messages", rev, ev.Type, ev.Revision, len(ev.Messages))
		}
		if ev.Messages[0].GetId() != fmt.Sprintf("a%d", i) || ev.Messages[1].GetId() != fmt.Sprintf("b%d", i) {
			t.Fatalf("replayed revision %d carries %q %q, want a%d b%d", rev, ev.Messages[0].GetId(), ev.Messages[1].GetId(), i, i)
		}
	}
	if ev := nextEvent(t, sub); ev.Type != storage.EventReplaced || ev.Session.MessageCount != 3 {
		t.Fatalf("after the replay: %v with %d messages, want the rewind's", ev.Type, ev.Session.MessageCount)
	}

	// The append at revision 3 lost its second message: it is no longer
	// read from its messages, so the history starts after it.
	var revs []int64
	rows, err := connect(t, dsn).Query(ctx, `SELECT revision FROM messages WHERE session_id = $1 AND revision IS NOT NULL ORDER BY pos`, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r int64
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r)
	}
	if rows.Err() != nil || fmt.Sprint(revs) != "[2 2]" {
		t.Errorf("revisions on the kept messages: %v (%v), want [2 2]", revs, rows.Err())
	}
}

// TestWatchPollsThroughOtherNotifications: a watcher whose wake-up was
// lost still delivers the append within a few poll intervals, while other
// sessions' notifications on the shared channel keep arriving faster than
// the poll interval (so its wait for a notification never times out).
func TestWatchPollsThroughOtherNotifications(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	writer := openSilent(t, dsn)
	const poll = 200 * time.Millisecond
	_, watching := openPolling(t, dsn, poll)
	se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	sub, err := watching.Watch(ctx, ref, se.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	noise := connect(t, dsn)
	stop, stopped := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			case <-time.After(poll / 10):
			}
			if _, err := noise.Exec(ctx, "SELECT pg_notify($1, $2)", postgres.NotifyChannel, "00000000-0000-0000-0000-000000000001 1"); err != nil {
				stopped <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-stopped; err != nil {
			t.Errorf("notify: %v", err)
		}
	}()
	res, err := writer.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: "m", Role: sessiondv1.Role_ROLE_USER, Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-sub.Events():
		if !ok {
			t.Fatalf("subscription ended: %v", sub.Err())
		}
		if ev.Revision != res.Revision {
			t.Fatalf("event at revision %d, want %d", ev.Revision, res.Revision)
		}
	case <-time.After(25 * poll):
		t.Fatalf("the append was not delivered within %v (poll interval %v) while other notifications kept arriving", 25*poll, poll)
	}
}

// TestWatchPollAsksOnce: a replica watching many idle sessions costs
// PostgreSQL one statement per poll for all of them, not a snapshot
// each; and what only the poll can find (the writer's notifications
// lost) still reaches the watchers: an append within a poll or two, a
// deletion that ends its watchers, a gap past the history that resets
// them. Sessions no longer subscribed to are dropped from the poll.
func TestWatchPollAsksOnce(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	writer := openSilent(t, dsn)
	const poll = 100 * time.Millisecond
	d, watching := openPolling(t, dsn, poll)
	// Only the watcher and the test's Watch calls, made before the count
	// starts, use d's pool.
	postgres.StopBackground(d)

	const n = 200
	refs := make([]storage.Ref, n)
	subs := make([]*storage.Subscription, n)
	for i := range refs {
		// Titled: an append then changes only the revision, count and
		// update time.
		se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = storage.Ref{Namespace: "ns", ID: se.ID}
		if subs[i], err = watching.Watch(ctx, refs[i], 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(subs[i].Close)
	}
	appendTo := func(i int) uint64 {
		t.Helper()
		res, err := writer.Append(ctx, storage.AppendRequest{Ref: refs[i], Messages: []*sessiondv1.Message{
			{Id: fmt.Sprint("m", i), Role: sessiondv1.Role_ROLE_USER, Content: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}

	// Two appends, each found by a poll, and at least two poll intervals.
	const appends = 2
	before, start := postgres.PoolAcquires(d), time.Now()
	for i := range appends {
		rev := appendTo(i)
		if ev := nextEvent(t, subs[i]); ev.Type != storage.EventAppended || ev.Revision != rev {
			t.Fatalf("session %d: %v at revision %d, want its append at %d", i, ev.Type, ev.Revision, rev)
		}
	}
	if rest := 2*poll - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	got, elapsed := postgres.PoolAcquires(d)-before, time.Since(start)
	// Polls start at least a poll interval apart, so at most
	// elapsed/poll + 1 began in the window, and one more may have been
	// under way: one statement each, and each append's catch-up (twice
	// at most: a poll's statement may run before a notification's
	// catch-up and report the session moved all the same).
	limit := int64(elapsed/poll) + 2 + 2*appends
	t.Logf("%d watched sessions: %d transactions or statements in %v (poll interval %v; at most %d allowed)", n, got, elapsed, poll, limit)
	if got > limit {
		t.Errorf("%d watched sessions: the watcher ran %d transactions or statements in %v, want at most %d (poll interval %v): the poll reads each session",
			n, got, elapsed.Round(time.Millisecond), limit, poll)
	}

	// A deletion the poll alone sees ends its watchers.
	if err := writer.Delete(ctx, refs[2], 0); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, subs[2]); ev.Type != storage.EventDeleted {
		t.Fatalf("after the deletion: %v at revision %d, want EventDeleted", ev.Type, ev.Revision)
	}
	endsWith(t, subs[2], nil)

	// So does a gap past the history: the watcher is held while more
	// updates than the history keeps are written, then reset.
	release := postgres.HoldWatcher(d)
	for i := range storage.WatchHistory + 2 {
		if _, err := writer.Update(ctx, storage.UpdateRequest{Ref: refs[3], Fields: storage.UpdateTitle, Title: fmt.Sprint("t", i)}); err != nil {
			release()
			t.Fatal(err)
		}
	}
	release()
	endsWith(t, subs[3], storage.ErrWatchReset)

	// Closed subscriptions leave the poll.
	for _, sub := range subs {
		sub.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); postgres.WatchedSessions(d) > 0; time.Sleep(poll / 4) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still polled 10 s after every subscription closed", postgres.WatchedSessions(d))
		}
	}
}

// BenchmarkWatchPoll: one poll of a replica watching idle sessions (with
// nothing to deliver), in time (w.mu is held for part of it) and in the
// transactions it sends PostgreSQL (a statement outside one counts as
// one).
func BenchmarkWatchPoll(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n, "-sessions"), func(b *testing.B) {
			dsn := pgtest.Schema(b)
			ctx := b.Context()
			d, s := openPolling(b, dsn, time.Hour)
			postgres.StopBackground(d)
			for range n {
				se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
				if err != nil {
					b.Fatal(err)
				}
				sub, err := s.Watch(ctx, storage.Ref{Namespace: "ns", ID: se.ID}, 0)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(sub.Close)
			}
			polls, before := 0, postgres.PoolAcquires(d)
			for b.Loop() {
				postgres.Poll(ctx, d)
				polls++
			}
			b.ReportMetric(float64(postgres.PoolAcquires(d)-before)/float64(polls), "transactions/op")
		})
	}
}

// endsWith waits (at most 10 s) for sub to end with no further event,
// with an error that is want (nil: none).
func endsWith(t *testing.T, sub *storage.Subscription, want error) {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		if ok {
			t.Fatalf("a %v event at revision %d, want the subscription to end", ev.Type, ev.Revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end within 10 s")
	}
	if err := sub.Err(); (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("the subscription ended with %v, want %v", err, want)
	}
}

// TestWatchFollowsLiveTurnPastHistory: while a message is open, a watcher
// on another replica that stops reading for more than the history's
// storage.WatchHistory revisions of deltas still reads every delta once
// and in order, then the finish, with no reset; the finish keeps the rows.
// A watcher further behind than the open message's
// bound (LiveHistoryEvents rows, fewer for a session with large metadata)
// is reset, as any watcher that fell out of the history.
func TestWatchFollowsLiveTurnPastHistory(t *testing.T) {
	dsn := pgtest.Schema(t)
	writer := open(t, dsn)
	d, watching := openHeld(t, dsn)
	ctx := t.Context()
	// A large metadata value leaves room for fewer rows in the open
	// message's bound, never fewer than the history's.
	big := map[string]string{}
	for i := range 16 {
		big[fmt.Sprint(i)] = strings.Repeat("v", 4<<10)
	}
	start := func(meta map[string]string) (storage.Ref, *storage.Subscription) {
		t.Helper()
		se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns", Metadata: meta, Messages: []*sessiondv1.Message{
			{Id: "q", Role: sessiondv1.Role_ROLE_USER, Content: "tell me a story"},
			{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}})
		if err != nil {
			t.Fatal(err)
		}
		ref := storage.Ref{Namespace: "ns", ID: se.ID}
		sub, err := watching.Watch(ctx, ref, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sub.Close)
		return ref, sub
	}
	// stream writes n deltas to ref's open message while the watcher is
	// held, and returns the text it built.
	stream := func(ref storage.Ref, n int) string {
		t.Helper()
		release := postgres.HoldWatcher(d)
		defer release()
		var text strings.Builder
		for i := range n {
			piece := fmt.Sprintf("d%05d ", i)
			if _, err := writer.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{
				MessageId: "open", Offset: int64(text.Len()), Content: piece}}); err != nil {
				t.Fatalf("delta %d: %v", i, err)
			}
			text.WriteString(piece)
		}
		return text.String()
	}

	// Fewer than a watch stream's buffer holds, so that the catch-up
	// delivers them in one page whatever the reader's pace.
	const deltas = 3 * storage.WatchHistory
	ref, sub := start(nil)
	text := stream(ref, deltas)
	if got := readDeltas(t, sub, 1, deltas); got != text {
		t.Fatalf("the watcher built %d bytes, want the %d streamed", len(got), len(text))
	}
	if n := eventRows(t, dsn, ref.ID); n != deltas+1 {
		t.Errorf("%d events rows while the message is open, want %d (the create's and every delta's)", n, deltas+1)
	}
	fin, err := writer.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "open"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub); ev.Type != storage.EventFinished || ev.Revision != fin.Revision {
		t.Fatalf("after the deltas: %v at revision %d, want the finish at %d", ev.Type, ev.Revision, fin.Revision)
	}
	if n := eventRows(t, dsn, ref.ID); n != deltas+2 {
		t.Errorf("%d events rows after the finish, want %d: the finish keeps the deltas' rows for its grace (trim_test.go checks what follows)", n, deltas+2)
	}

	// Past the bound: the first revision the watcher needs is gone, in its
	// first page of events (small metadata) or with that whole page (large
	// metadata, the watcher a page further behind).
	for _, c := range []struct {
		name string
		meta map[string]string
		rows int
		lag  int
	}{
		{"small metadata", nil, postgres.LiveHistoryEvents, postgres.LiveHistoryEvents + 10},
		{"large metadata", big, storage.WatchHistory, storage.WatchHistory + storage.WatchBuffer + 10},
	} {
		ref, sub := start(c.meta)
		stream(ref, c.lag)
		if n := eventRows(t, dsn, ref.ID); n != c.rows+1 {
			t.Errorf("%s: %d events rows while the message is open, want %d", c.name, n, c.rows+1)
		}
		// The first delta it needs is gone: reset before any is
		// delivered, rather than given the rest with a gap.
		select {
		case ev, ok := <-sub.Events():
			if ok {
				t.Fatalf("%s: a %v event at revision %d, want a reset first", c.name, ev.Type, ev.Revision)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a watcher %d deltas behind was neither reset nor given an event within 10 s", c.name, c.lag)
		}
		if !errors.Is(sub.Err(), storage.ErrWatchReset) {
			t.Errorf("%s: a watcher %d deltas behind ended with %v, want ErrWatchReset", c.name, c.lag, sub.Err())
		}
	}
}

// TestWatchStalledWatcherDelaysNoOther: a watcher that stops reading (its
// buffer past half full, so that its session's catch-ups wait for it to
// make room before publishing more) while a busy writer keeps its session
// moving holds up no other session on its replica: another session's
// append reaches its watcher, and a watch of a third session is answered,
// well within the time the stalled one is waited for, while it still is.
func TestWatchStalledWatcherDelaysNoOther(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	writer := open(t, dsn)
	d, watching := openPolling(t, dsn, time.Hour) // woken by notifications alone
	create := func() storage.Ref {
		t.Helper()
		se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return storage.Ref{Namespace: "ns", ID: se.ID}
	}
	stalledRef, otherRef, newRef := create(), create(), create()
	stalled, err := watching.Watch(ctx, stalledRef, 0) // never read
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	other, err := watching.Watch(ctx, otherRef, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	stop, stopped := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := range 20000 {
			select {
			case <-stop:
				stopped <- nil
				return
			default:
			}
			if _, err := writer.Append(ctx, storage.AppendRequest{Ref: stalledRef, Messages: []*sessiondv1.Message{
				{Id: fmt.Sprint("s", i), Role: sessiondv1.Role_ROLE_USER, Content: "x"}}}); err != nil {
				stopped <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		stopped <- nil
	}()
	stopWriter := sync.OnceFunc(func() {
		close(stop)
		if err := <-stopped; err != nil {
			t.Errorf("the busy writer: %v", err)
		}
	})
	defer stopWriter()

	// Past half its buffer: from the next append on, the stalled session's
	// catch-ups wait for room.
	for deadline := time.Now().Add(30 * time.Second); len(stalled.Events()) <= storage.WatchBuffer/2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled watcher holds %d events after 30 s of appends, want more than %d", len(stalled.Events()), storage.WatchBuffer/2)
		}
	}
	time.Sleep(20 * time.Millisecond) // a few appends more: its catch-up waits

	// A functional bound, well under the catch-up's wait, not a speed
	// target. Both at once, as either would wait for a catch-up that holds
	// up the replica.
	const bound = 500 * time.Millisecond
	if bound >= postgres.CatchUpDrain/2 {
		t.Fatalf("bound %v is not well under the catch-up's wait %v", bound, postgres.CatchUpDrain)
	}
	watched := make(chan error, 1)
	go func() {
		start := time.Now()
		sub, err := watching.Watch(ctx, newRef, 0)
		if err != nil {
			watched <- err
			return
		}
		sub.Close()
		took := time.Since(start)
		t.Logf("a watch of a third session took %v", took.Round(time.Millisecond))
		if took > bound {
			watched <- fmt.Errorf("a watch of a third session took %v while another session's watcher stalled, want at most %v", took.Round(time.Millisecond), bound)
			return
		}
		watched <- nil
	}()
	res, err := writer.Append(ctx, storage.AppendRequest{Ref: otherRef, Messages: []*sessiondv1.Message{{Id: "o", Role: sessiondv1.Role_ROLE_USER, Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	appended := time.Now()
	if !postgres.Subscribed(d, stalledRef.ID) {
		t.Fatal("the stalled watcher was cut off before the other sessions were tried: the test shows nothing")
	}
	select {
	case ev, ok := <-other.Events():
		if !ok {
			t.Fatalf("the other session's subscription ended: %v", other.Err())
		}
		if ev.Revision != res.Revision {
			t.Fatalf("the other session's event at revision %d, want %d", ev.Revision, res.Revision)
		}
		took := time.Since(appended)
		t.Logf("the other session's append reached its watcher %v after it returned", took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("the other session's append reached its watcher %v after it returned while another session's watcher stalled, want at most %v", took.Round(time.Millisecond), bound)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other session's append did not reach its watcher within 10 s")
	}
	if err := <-watched; err != nil {
		t.Error(err)
	}

	// The stalled watcher is cut off in the end, as before, by what its
	// writer wrote while it was waited for.
	for deadline := time.Now().Add(10 * time.Second); postgres.Subscribed(d, stalledRef.ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stalled watcher was not cut off within 10 s")
		}
	}
	stopWriter()
	for range stalled.Events() {
	}
	if !errors.Is(stalled.Err(), storage.ErrWatchReset) {
		t.Errorf("the stalled watcher ended with %v, want ErrWatchReset", stalled.Err())
	}
}

// TestWatchSessionsCaughtUpApart: while several sessions are written at
// once, each caught up on its own, watchers that join each session
// mid-stream on another replica (from now, and resuming from a revision
// in the past) read every revision from their first on, once and in order,
// up to the last: none falls between a replay and the live events, none
// is published twice by catch-ups that run beside a new watch.
func TestWatchSessionsCaughtUpApart(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	writer := open(t, dsn)
	_, watching := openPolling(t, dsn, 200*time.Millisecond)
	const sessions, appends, joiners = 6, 120, 4
	type watch struct {
		sub  *storage.Subscription
		from uint64 // 0: from now
	}
	var (
		mu      sync.Mutex
		watches = map[string][]watch{}
		wg      sync.WaitGroup
		errs    = make(chan error, sessions*(joiners+1))
	)
	refs := make([]storage.Ref, sessions)
	for i := range refs {
		se, err := writer.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = storage.Ref{Namespace: "ns", ID: se.ID}
		sub, err := watching.Watch(ctx, refs[i], 0)
		if err != nil {
			t.Fatal(err)
		}
		watches[se.ID] = []watch{{sub: sub}}
	}
	defer func() {
		for _, ws := range watches {
			for _, w := range ws {
				w.sub.Close()
			}
		}
	}()
	for _, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				res, err := writer.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{
					{Id: fmt.Sprint("m", i), Role: sessiondv1.Role_ROLE_USER, Content: "x"}}})
				if err != nil {
					errs <- err
					return
				}
				if i%(appends/joiners) != appends/joiners/2 {
					continue
				}
				// Join now, alternately from now and from a few
				// revisions back.
				var from uint64
				if i%2 == 0 {
					from = res.Revision - 5
				}
				sub, err := watching.Watch(ctx, ref, from)
				if err != nil {
					errs <- fmt.Errorf("watch of session %s from %d: %w", ref.ID, from, err)
					return
				}
				mu.Lock()
				watches[ref.ID] = append(watches[ref.ID], watch{sub: sub, from: from})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, ref := range refs {
		final, err := writer.Get(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		for j, w := range watches[ref.ID] {
			var prev uint64
			for prev < final.Revision {
				ev := nextEvent(t, w.sub)
				switch {
				case prev == 0 && w.from != 0 && ev.Revision != w.from+1:
					t.Fatalf("session %s, watcher %d from %d: first event at revision %d, want %d", ref.ID, j, w.from, ev.Revision, w.from+1)
				case prev != 0 && ev.Revision != prev+1:
					t.Fatalf("session %s, watcher %d: revision %d after %d", ref.ID, j, ev.Revision, prev)
				}
				prev = ev.Revision
			}
			select {
			case ev, ok := <-w.sub.Events():
				if ok {
					t.Fatalf("session %s, watcher %d: an event at revision %d past the last, %d", ref.ID, j, ev.Revision, final.Revision)
				}
				t.Fatalf("session %s, watcher %d ended: %v", ref.ID, j, w.sub.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// TestNotificationsCoalesce: a Store sends its wake-ups at most once every
// notifyGap, each session's newest revision once in each: a session
// appended to a hundred times, one append after another, gets at most a
// notification per gap, and the last carries its final revision.
func TestNotificationsCoalesce(t *testing.T) {
	dsn := pgtest.Schema(t)
	listen := connect(t, dsn)
	if _, err := listen.Exec(t.Context(), "LISTEN "+postgres.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	s := open(t, dsn)
	ref := createSessions(t, s, 1)[0]
	start := time.Now()
	var last uint64
	for k := range 100 {
		res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{userMsg(fmt.Sprintf("m-%d", k))}})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Revision
	}
	got := 0
	for rev := uint64(0); rev < last; {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		n, err := listen.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("no notification of revision %d after %d notifications: %v", last, got, err)
		}
		var id string
		if id, rev = postgres.ParsePayload(n.Payload); id != ref.ID || rev == 0 {
			t.Fatalf("notification %q, want one of session %s with its revision", n.Payload, ref.ID)
		}
		got++
	}
	// One more than the gaps elapsed: the session's creation may have
	// had a notification of its own.
	if most := int(time.Since(start)/postgres.NotifyGap) + 2; got > most {
		t.Errorf("%d notifications of 100 appends in %v, want at most %d: one per %v", got, time.Since(start), most, postgres.NotifyGap)
	}
}

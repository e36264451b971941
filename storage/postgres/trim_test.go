package postgres_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// openWriter opens a Store on dsn whose finishes keep their deltas' rows
// for grace.
func openWriter(t *testing.T, dsn string, grace time.Duration) *storage.Store {
	t.Helper()
	d, s, err := postgres.OpenDriver(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	postgres.SetFinishGrace(d, grace)
	return s
}

// openTurn creates through s a session holding a question and an open
// answer, message "open", and returns it.
func openTurn(t *testing.T, s *storage.Store) storage.Ref {
	t.Helper()
	se, err := s.Create(t.Context(), storage.CreateRequest{Namespace: "ns", Messages: []*sessiondv1.Message{
		{Id: "q", Role: sessiondv1.Role_ROLE_USER, Content: "tell me a story"},
		{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}})
	if err != nil {
		t.Fatal(err)
	}
	return storage.Ref{Namespace: "ns", ID: se.ID}
}

// streamDeltas writes n deltas, each naming its number, to ref's open
// message msgID through s, and returns the text they make.
func streamDeltas(t *testing.T, s *storage.Store, ref storage.Ref, msgID string, n int) string {
	t.Helper()
	var text strings.Builder
	for i := range n {
		piece := fmt.Sprintf("d%05d ", i)
		if _, err := s.AppendDelta(t.Context(), storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{
			MessageId: msgID, Offset: int64(text.Len()), Content: piece}}); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
		text.WriteString(piece)
	}
	return text.String()
}

// finish closes ref's message msgID through s and returns its revision.
func finish(t *testing.T, s *storage.Store, ref storage.Ref, msgID string) uint64 {
	t.Helper()
	fin, err := s.FinishMessage(t.Context(), storage.FinishRequest{Ref: ref, MessageID: msgID})
	if err != nil || !fin.Closed {
		t.Fatalf("FinishMessage: %+v, %v", fin, err)
	}
	return fin.Revision
}

// trimMark is session id's sessions.events_trim_ns (nil: not marked).
func trimMark(t *testing.T, dsn, id string) *int64 {
	t.Helper()
	_, mark := trimState(t, connect(t, dsn), id)
	return mark
}

// trimState is session id's events rows and sessions.events_trim_ns, read
// on conn.
func trimState(t *testing.T, conn *pgx.Conn, id string) (rows int, mark *int64) {
	t.Helper()
	if err := conn.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM events WHERE session_id = $1), events_trim_ns FROM sessions WHERE id = $1`,
		id).Scan(&rows, &mark); err != nil {
		t.Fatal(err)
	}
	return rows, mark
}

// waitTrim waits (at most limit) until session id has no trim mark and
// its events rows satisfy ok.
func waitTrim(t *testing.T, dsn, id string, limit time.Duration, ok func(rows int) bool) {
	t.Helper()
	conn := connect(t, dsn)
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		n, mark := trimState(t, conn, id)
		if mark == nil && ok(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %d events rows, mark %v, %v after the wait began", id, n, mark, limit)
		}
	}
}

// waitRows waits (at most limit) until session id has want events rows
// and no trim mark.
func waitRows(t *testing.T, dsn, id string, want int, limit time.Duration) {
	t.Helper()
	waitTrim(t, dsn, id, limit, func(n int) bool { return n == want })
}

// heldWatch watches ref through watching (the Store over d, opened by
// openHeld) from now, and holds d's watcher back until release.
func heldWatch(t *testing.T, d *postgres.Store, watching *storage.Store, ref storage.Ref) (sub *storage.Subscription, release func()) {
	t.Helper()
	sub, err := watching.Watch(t.Context(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	release = sync.OnceFunc(postgres.HoldWatcher(d))
	t.Cleanup(release)
	return sub, release
}

// readDeltas reads n deltas from sub, which has had the events up to
// revision from of a message it saw empty: one per revision, each at the
// end of the text so far. It returns the text they make.
func readDeltas(t *testing.T, sub *storage.Subscription, from uint64, n int) string {
	t.Helper()
	var got string
	for i := range n {
		ev := nextEvent(t, sub)
		want := from + uint64(i) + 1
		if ev.Type != storage.EventDelta || ev.Revision != want || ev.Delta.GetOffset() != int64(len(got)) {
			t.Fatalf("event %d: %v at revision %d offset %d, want a delta at revision %d offset %d",
				i, ev.Type, ev.Revision, ev.Delta.GetOffset(), want, len(got))
		}
		got += ev.Delta.GetContent()
	}
	return got
}

// TestFinishKeepsTurnForHeldBackWatcher: a watcher on another replica
// held back while a turn streams far more deltas than the history's
// storage.WatchHistory revisions and finishes reads every delta and the
// finish afterwards, with no reset: the finish keeps the rows the open
// message's bound kept.
func TestFinishKeepsTurnForHeldBackWatcher(t *testing.T) {
	dsn := pgtest.Schema(t)
	writer := openWriter(t, dsn, postgres.FinishGrace)
	d, watching := openHeld(t, dsn)
	ref := openTurn(t, writer)
	sub, release := heldWatch(t, d, watching, ref)
	const deltas = 300
	text := streamDeltas(t, writer, ref, "open", deltas)
	fin := finish(t, writer, ref, "open")
	if n := eventRows(t, dsn, ref.ID); n != deltas+2 {
		t.Errorf("%d events rows after the finish, want %d: the create's, every delta's and the finish's", n, deltas+2)
	}
	if trimMark(t, dsn, ref.ID) == nil {
		t.Error("the finish of a turn past the history left its session unmarked")
	}
	release()

	if got := readDeltas(t, sub, 1, deltas); got != text {
		t.Fatalf("the watcher built %d bytes, want the %d streamed", len(got), len(text))
	}
	if ev := nextEvent(t, sub); ev.Type != storage.EventFinished || ev.Revision != fin || ev.Messages[0].GetContent() != text {
		t.Fatalf("after the deltas: %v at revision %d, want the finish at %d with the whole text", ev.Type, ev.Revision, fin)
	}
}

// TestTrimAfterFinishGrace: a finished turn's surplus rows stay through
// the grace, across a write with an events row meanwhile, and go after
// it, down to the history and the row before it, though the replica that
// finished has stopped: another replica's trimmer takes the mark from the
// session's row. A watcher held back past the grace is then reset, never
// given the turn with a gap. A turn within the history marks nothing.
func TestTrimAfterFinishGrace(t *testing.T) {
	dsn := pgtest.Schema(t)
	const grace = 2 * time.Second
	writer := openWriter(t, dsn, grace)
	d, watching := openHeld(t, dsn)
	ctx := t.Context()
	ref := openTurn(t, writer)
	sub, release := heldWatch(t, d, watching, ref)
	const deltas = 300
	streamDeltas(t, writer, ref, "open", deltas)
	finished := time.Now()
	finish(t, writer, ref, "open")
	// A write with an events row right after the turn (as a tool's
	// answer, which changes the tally, is) keeps the turn's rows too.
	if _, err := writer.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateSummary, Summary: "a story"}); err != nil {
		t.Fatal(err)
	}
	if n := eventRows(t, dsn, ref.ID); n != deltas+3 && time.Since(finished) < grace {
		t.Errorf("%d events rows within the grace, want %d", n, deltas+3)
	}
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dsn, ref.ID, storage.WatchHistory+1, grace+10*time.Second)
	if since := time.Since(finished); since < grace {
		t.Errorf("the rows were trimmed %v after the finish, within its grace of %v", since, grace)
	}

	release()
	endsWith(t, sub, storage.ErrWatchReset)

	// A turn that stays within the history has nothing to trim.
	other := openWriter(t, dsn, grace)
	short := openTurn(t, other)
	streamDeltas(t, other, short, "open", storage.WatchHistory/2)
	finish(t, other, short, "open")
	if mark := trimMark(t, dsn, short.ID); mark != nil {
		t.Errorf("a turn of %d deltas marked its session for trimming (%d)", storage.WatchHistory/2, *mark)
	}
}

// TestTrimGraceByDatabaseClock: the grace runs from PostgreSQL's clock,
// not from the session's updated_ns, which a replica whose clock runs
// ahead leaves in the future (and later writes only move forward): the
// rows still go about a grace after the finish.
func TestTrimGraceByDatabaseClock(t *testing.T) {
	dsn := pgtest.Schema(t)
	const grace = 2 * time.Second
	s := openWriter(t, dsn, grace)
	ref := openTurn(t, s)
	streamDeltas(t, s, ref, "open", 100)
	conn := connect(t, dsn)
	if _, err := conn.Exec(t.Context(), `UPDATE sessions SET updated_ns = updated_ns + $2 WHERE id = $1`,
		ref.ID, time.Hour.Nanoseconds()); err != nil {
		t.Fatal(err)
	}
	finish(t, s, ref, "open")
	var ahead time.Duration
	if err := conn.QueryRow(t.Context(), `SELECT events_trim_ns - `+postgres.DBNowNS+` FROM sessions WHERE id = $1`,
		ref.ID).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if ahead > grace {
		t.Fatalf("the mark is %v ahead of the database's clock, want at most the grace %v", ahead, grace)
	}
	waitRows(t, dsn, ref.ID, storage.WatchHistory+1, grace+10*time.Second)
}

// TestTrimLeavesNextOpenTurn: a session whose next message opens within
// the grace of the last finish keeps its rows by the open message's bound
// once the grace ends (the trimmer clears its mark and leaves its rows),
// and the next finish marks it again.
func TestTrimLeavesNextOpenTurn(t *testing.T) {
	dsn := pgtest.Schema(t)
	const grace = 2 * time.Second
	s := openWriter(t, dsn, grace)
	ctx := t.Context()
	ref := openTurn(t, s)
	const deltas = 100
	streamDeltas(t, s, ref, "open", deltas)
	finish(t, s, ref, "open")
	next := &sessiondv1.Message{Id: "next", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{next}}); err != nil {
		t.Fatal(err)
	}
	streamDeltas(t, s, ref, "next", deltas)
	// create, deltas, finish, the open append, deltas
	all := 2*deltas + 3
	waitRows(t, dsn, ref.ID, all, grace+10*time.Second)
	finish(t, s, ref, "next")
	if trimMark(t, dsn, ref.ID) == nil {
		t.Fatal("the second finish left its session unmarked")
	}
	waitRows(t, dsn, ref.ID, storage.WatchHistory+1, grace+10*time.Second)
}

// TestTrimBesideAppends: three replicas' trimmers take the finished turns
// of many sessions while plain appends (the group commit) go to the same
// sessions through two of them: every append succeeds (no deadlock with
// the trimmers' row locks), and every session ends with its history's
// rows alone and every message.
func TestTrimBesideAppends(t *testing.T) {
	dsn := pgtest.Schema(t)
	const grace = 200 * time.Millisecond
	live := openWriter(t, dsn, grace)
	appenders := []*storage.Store{openWriter(t, dsn, grace), openWriter(t, dsn, grace)}
	ctx := t.Context()
	const sessions, deltas, appends = 12, 80, 40
	refs := make([]storage.Ref, sessions)
	for i := range refs {
		refs[i] = openTurn(t, live)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*(appends+1))
	for i, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var text strings.Builder
			for j := range deltas {
				piece := fmt.Sprintf("d%05d ", j)
				if _, err := live.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{
					MessageId: "open", Offset: int64(text.Len()), Content: piece}}); err != nil {
					errs <- fmt.Errorf("session %d delta %d: %w", i, j, err)
					return
				}
				text.WriteString(piece)
			}
			if _, err := live.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "open"}); err != nil {
				errs <- fmt.Errorf("session %d finish: %w", i, err)
				return
			}
			// Plain appends through the other replicas while the
			// trimmers take the turn's rows.
			for j := range appends {
				msg := &sessiondv1.Message{Id: fmt.Sprintf("u%d", j), Role: sessiondv1.Role_ROLE_USER, Content: "more"}
				if _, err := appenders[j%2].Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg}}); err != nil {
					errs <- fmt.Errorf("session %d append %d: %w", i, j, err)
					return
				}
				time.Sleep(time.Duration(j%3) * 5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, ref := range refs {
		got, err := live.Get(ctx, ref)
		if err != nil || got.MessageCount != 2+appends {
			t.Fatalf("session %s: %+v, %v; want %d messages", ref.ID, got, err, 2+appends)
		}
		// The trim came at some revision after the finish: it left at
		// most the history and the row before it (the plain appends
		// wrote none).
		waitTrim(t, dsn, ref.ID, grace+10*time.Second, func(n int) bool { return n <= storage.WatchHistory+1 })
	}
}

// TestUpgradeToFinishTrim: a database of schema version 10 with data
// opens migrated to the trimmer's schema, with no session marked, and its
// sessions' turns keep and then trim their rows as a new session's do.
func TestUpgradeToFinishTrim(t *testing.T) {
	dsn := pgtest.Schema(t)
	postgres.MigrateTo(t, dsn, lastReleasedSchema)
	id := seedReleased(t, dsn)
	postgres.MigrateTo(t, dsn, 10)
	const grace = 2 * time.Second
	s := openWriter(t, dsn, grace)
	ctx := t.Context()
	if mark := trimMark(t, dsn, id); mark != nil {
		t.Fatalf("a session of schema version 10 is marked for trimming (%d) after the upgrade", *mark)
	}
	ref := storage.Ref{Namespace: "ns", ID: id}
	open := &sessiondv1.Message{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{open}}); err != nil {
		t.Fatal(err)
	}
	const deltas = 100
	streamDeltas(t, s, ref, "a", deltas)
	// The released rows (revisions 1 and 2), the open append's, every
	// delta's and the finish's.
	all := deltas + 4
	finished := time.Now()
	finish(t, s, ref, "a")
	if n := eventRows(t, dsn, id); n != all && time.Since(finished) < grace {
		t.Errorf("%d events rows after the finish, want %d", n, all)
	}
	// The newest row at or before the history's start and the history.
	waitRows(t, dsn, id, storage.WatchHistory+1, grace+10*time.Second)
}

// TestTrimPlanIndexDriven: the trimmer's pass, planned as the driver
// plans it (a generic plan), finds the sessions due through
// sessions_events_trim, not by reading every session's row, so that an
// idle pass on a large store costs next to nothing.
func TestTrimPlanIndexDriven(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	ctx := t.Context()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `INSERT INTO sessions (id, namespace, created_ns, updated_ns, revision, message_count, meta, events_trim_ns)
		SELECT gen_random_uuid(), 'ns', i, i, 1, 0, $1, CASE WHEN i % 1000 = 0 THEN i END
		FROM generate_series(1, 20000) AS i`, postgres.EncodeMeta(&storage.Session{})); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE sessions"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "trim", postgres.TrimSQL); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE trim(64, 64)")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if plan := strings.Join(lines, "\n"); strings.Contains(plan, "Seq Scan on sessions") || !strings.Contains(plan, "sessions_events_trim") {
		t.Errorf("the trimmer's pass does not find the sessions due through sessions_events_trim:\n%s", plan)
	}
}

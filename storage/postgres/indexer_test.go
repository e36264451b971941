package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// unindexed returns how many messages of the database dsn names the search
// indexer has not reached, counting each open message.
func unindexed(t *testing.T, dsn string) int64 {
	t.Helper()
	var n int64
	if err := connect(t, dsn).QueryRow(t.Context(), `SELECT coalesce(sum(message_count - search_count), 0) FROM sessions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitIndexed waits until every message but the open ones is indexed,
// failing the test after limit.
func waitIndexed(t *testing.T, dsn string, limit time.Duration) time.Duration {
	t.Helper()
	conn := connect(t, dsn)
	start := time.Now()
	for {
		var n int64
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM sessions
			WHERE search_count < message_count - (open_message_id IS NOT NULL)::int`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%d sessions still have messages to index after %v", n, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSearchIndexerUnderLoad: with 16 writers appending, each message is
// indexed within 2 s of its append, and a search finds every message the
// moment its append returns, indexed or not.
func TestSearchIndexerUnderLoad(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	const writers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns"})
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				word := fmt.Sprintf("zq%02dx%03d", w, i)
				if _, err := s.Append(ctx, storage.AppendRequest{Ref: storage.Ref{Namespace: "ns", ID: se.ID},
					Messages: []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "say " + word + " now"}}}); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					if n, err := searchCount(s, word); n != 1 || err != nil {
						errs <- fmt.Errorf("search for %s right after its append: %d hits, %v; want 1", word, n, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if took := waitIndexed(t, dsn, 2*time.Second); took > 0 {
		t.Logf("indexed %d messages %v after the last append", writers*each, took)
	}
	if n := unindexed(t, dsn); n != 0 {
		t.Fatalf("%d messages unindexed", n)
	}
	for w := range writers {
		if n := hits(t, s, fmt.Sprintf("zq%02dx%03d", w, each-1)); n != 1 {
			t.Fatalf("search for writer %d's last message once indexed: %d hits", w, n)
		}
	}
}

// TestSearchIndexRewrites: a rewind, a save and a delete drop the indexed
// text of the messages they remove, so text that is gone is never found
// and what takes its place is.
func TestSearchIndexRewrites(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := context.Background()
	user := func(id, text string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: text}
	}
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Messages: []*sessiondv1.Message{user("a", "alpha words"), user("b", "bravo words")}})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	waitIndexed(t, dsn, 10*time.Second)
	if _, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref, MessageCount: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{user("c", "charlie words")}}); err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, dsn, 10*time.Second)
	if n, m := hits(t, s, "bravo"), hits(t, s, "charlie"); n != 0 || m != 1 {
		t.Fatalf("after a rewind and an append at its place: bravo %d hits, charlie %d; want 0 and 1", n, m)
	}
	if _, err := s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: []*sessiondv1.Message{user("d", "delta words")}}); err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, dsn, 10*time.Second)
	if n, m := hits(t, s, "alpha"), hits(t, s, "delta"); n != 0 || m != 1 {
		t.Fatalf("after a save: alpha %d hits, delta %d; want 0 and 1", n, m)
	}
	fork, err := s.Fork(ctx, storage.ForkRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if n := hits(t, s, "delta"); n != 2 {
		t.Fatalf("after a fork: delta %d hits, want 2", n)
	}
	if err := s.Delete(ctx, ref, 0); err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := connect(t, dsn).QueryRow(ctx, `SELECT count(*) FROM message_search WHERE session_id = $1`, se.ID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("indexed text left of a deleted session: %d, %v", left, err)
	}
	if n := hits(t, s, "delta"); n != 1 {
		t.Fatalf("after deleting the source: delta %d hits, want the fork's (%s)", n, fork.ID)
	}
}

// hits counts the search hits for query in namespace "ns".
func hits(t *testing.T, s *storage.Store, query string) int {
	t.Helper()
	n, err := searchCount(s, query)
	if err != nil {
		t.Fatalf("Search %q: %v", query, err)
	}
	return n
}

func searchCount(s *storage.Store, query string) (int, error) {
	n := 0
	err := s.Search(context.Background(), storage.SearchOptions{Namespace: "ns", Query: query}, func(storage.SearchHit) error { n++; return nil })
	return n, err
}

// TestIndexerLocksInGroupCommitOrder: the indexer takes its sessions' row
// locks in the order a group commit takes them (by id), whatever their
// namespaces, so a batch that holds one of them and then locks another
// never deadlocks with it. The transaction below locks the sessions as a
// batch does, with a deadlock_timeout short enough that it, not the
// indexer, would be the one PostgreSQL aborts.
func TestIndexerLocksInGroupCommitOrder(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	msg := []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "words"}}
	first, err := s.Create(ctx, storage.CreateRequest{Namespace: "b", Messages: msg})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Create(ctx, storage.CreateRequest{Namespace: "a", Messages: msg})
	if err != nil {
		t.Fatal(err)
	}
	// low has the smaller id and the later namespace: ordered by namespace,
	// high comes first; ordered by id, low does.
	low, high := first.ID, second.ID
	if low > high {
		t.Fatalf("ids not in creation order: %s then %s", first.ID, second.ID)
	}
	waitIndexed(t, dsn, 10*time.Second)
	admin, batch := connect(t, dsn), connect(t, dsn)
	for attempt := 0; ; attempt++ {
		if _, err := admin.Exec(ctx, `UPDATE sessions SET search_count = 0 WHERE id = ANY($1::uuid[])`, []string{low, high}); err != nil {
			t.Fatal(err)
		}
		tx, err := batch.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '50ms'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT id FROM sessions WHERE id = $1::uuid FOR UPDATE`, low); err != nil {
			t.Fatal(err)
		}
		if !indexerWaits(t, admin, batch.PgConn().PID(), 3*time.Second) {
			// The indexer passed between the UPDATE and the lock: again.
			_ = tx.Rollback(ctx)
			if attempt == 3 {
				t.Fatal("the indexer never waited for the locked session")
			}
			continue
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT id FROM sessions WHERE id = $1::uuid FOR UPDATE`, high); err != nil {
			t.Fatalf("locking the second session while the indexer waits for the first: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	waitIndexed(t, dsn, 10*time.Second)
}

// TestIndexerWritesWithoutSessionLocks: while a pass writes its
// signatures (held here by a row of message_search that another
// transaction has locked), it holds no session's row lock: appends and a
// rewind of its session go through at once. The pass, whose session
// changed meanwhile, then writes nothing, and the next one indexes the
// session as it is.
func TestIndexerWritesWithoutSessionLocks(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	user := func(id, text string) []*sessiondv1.Message {
		return []*sessiondv1.Message{{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: text}}
	}
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "t", Messages: append(user("a", "alpha words"), user("b", "bravo words")...)})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	waitIndexed(t, dsn, 10*time.Second)
	admin, blocker := connect(t, dsn), connect(t, dsn)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE message_search SET sig = sig WHERE session_id = $1 AND pos = 0`, se.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE sessions SET search_count = 0 WHERE id = $1`, se.ID); err != nil {
		t.Fatal(err)
	}
	if !indexerWaitsIn(t, admin, blocker.PgConn().PID(), "INSERT INTO message_search", 10*time.Second) {
		t.Fatal("the indexer never waited for the locked signature")
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Append(quick, storage.AppendRequest{Ref: ref, Messages: user("c", "charlie words")}); err != nil {
		t.Fatalf("append while the indexer writes signatures of its session: %v", err)
	}
	if _, err := s.Rewind(quick, storage.RewindRequest{Ref: ref, MessageCount: 1}); err != nil {
		t.Fatalf("rewind while the indexer writes signatures of its session: %v", err)
	}
	if _, err := s.Append(quick, storage.AppendRequest{Ref: ref, Messages: user("d", "delta words")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, dsn, 10*time.Second)
	for query, want := range map[string]int{"alpha": 1, "bravo": 0, "charlie": 0, "delta": 1} {
		if n := hits(t, s, query); n != want {
			t.Errorf("search %q after the rewind: %d hits, want %d", query, n, want)
		}
	}
	var stale int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM message_search WHERE session_id = $1 AND pos >= 2`, se.ID).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("%d signatures past the session's 2 messages (%v); want none", stale, err)
	}
}

// indexerWaits reports whether the indexer's move of search_count waits for a lock that
// the backend pid holds, within limit.
func indexerWaits(t *testing.T, conn *pgx.Conn, pid uint32, limit time.Duration) bool {
	t.Helper()
	return indexerWaitsIn(t, conn, pid, "UPDATE sessions s SET search_count", limit)
}

// indexerWaitsIn reports whether the indexer's statement holding stmt
// waits for a lock that the backend pid holds, within limit.
func indexerWaitsIn(t *testing.T, conn *pgx.Conn, pid uint32, stmt string, limit time.Duration) bool {
	t.Helper()
	for start := time.Now(); time.Since(start) < limit; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE $1::int = ANY(pg_blocking_pids(pid)) AND query LIKE '%' || $2 || '%'`, int32(pid), stmt).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return true
		}
	}
	return false
}

// TestAppendIndexesCaughtUpSession: with the indexer stopped, a
// one-statement append, alone or in a batch, writes its messages'
// signatures itself into a session whose messages are all indexed, and
// leaves those of a session the indexer has not caught up with to the
// indexer; search finds the messages either way.
func TestAppendIndexesCaughtUpSession(t *testing.T) {
	dsn := pgtest.Schema(t)
	d, s := openDriver(t, dsn, 4)
	postgres.StopBackground(d)
	ctx := t.Context()
	refs := createSessions(t, s, 2)
	caughtUp, other := refs[0], refs[1]
	behind, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "behind",
		Messages: []*sessiondv1.Message{userMsg("b0")}})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: "word zq" + id + " here"}
	}
	appendOne := func(ref storage.Ref, id string) {
		if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg(id)}}); err != nil {
			t.Fatal(err)
		}
	}
	appendOne(caughtUp, "a0") // alone

	release := postgres.HoldAppends(t, d)
	done := make(chan error, 4)
	batch := []struct {
		ref storage.Ref
		id  string
	}{{caughtUp, "a1"}, {other, "o0"}, {storage.Ref{Namespace: "ns", ID: behind.ID}, "b1"}, {caughtUp, "a2"}}
	for i, a := range batch {
		go func() {
			_, err := s.Append(ctx, storage.AppendRequest{Ref: a.ref, Messages: []*sessiondv1.Message{msg(a.id)}})
			done <- err
		}()
		postgres.WaitQueued(t, d, i+1)
	}
	release(len(batch))
	for range batch {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if postgres.Grouped(d) < uint64(len(batch)) {
		t.Fatalf("%d appends written in batches; want %d", postgres.Grouped(d), len(batch))
	}

	conn := connect(t, dsn)
	for _, w := range []struct {
		id      string
		indexed []string // the messages message_search holds, by position
		count   int64    // search_count
	}{{caughtUp.ID, []string{"a0", "a1", "a2"}, 3}, {other.ID, []string{"o0"}, 1}, {behind.ID, nil, 0}} {
		var count int64
		if err := conn.QueryRow(ctx, `SELECT search_count FROM sessions WHERE id = $1`, w.id).Scan(&count); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, `SELECT pos, sig::text FROM message_search WHERE session_id = $1 ORDER BY pos`, w.id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var pos int64
		var sig string
		if _, err := pgx.ForEachRow(rows, []any{&pos, &sig}, func() error {
			got = append(got, fmt.Sprintf("%d:%s", pos, sig))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, id := range w.indexed {
			bits, _ := postgres.Signature(postgres.SearchText(storage.MessageTexts(msg(id))...))
			want = append(want, fmt.Sprintf("%d:%s", i, bitString(bits.Bytes)))
		}
		if count != w.count || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("session %s: search_count %d, %d signatures; want %d and the signatures of %v", w.id, count, len(got), w.count, w.indexed)
		}
	}
	for _, id := range []string{"a0", "a2", "o0", "b1"} {
		if n := hits(t, s, "zq"+id); n != 1 {
			t.Errorf("search for %s: %d hits; want 1", id, n)
		}
	}
}

// bitString is b as PostgreSQL prints a bit string: its first byte's high
// bit first.
func bitString(b []byte) string {
	var out []byte
	for _, c := range b {
		for i := 7; i >= 0; i-- {
			out = append(out, '0'+c>>i&1)
		}
	}
	return string(out)
}

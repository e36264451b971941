package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// openDriver opens a store on dsn and returns the driver too, both closed
// when the test ends.
func openDriver(t testing.TB, dsn string, maxConns int32) (*postgres.Store, *storage.Store) {
	t.Helper()
	d, s, err := postgres.OpenDriver(t.Context(), dsn, postgres.Options{MaxConns: maxConns, MinConns: 1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return d, s
}

func userMsg(id string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: "content of " + id}
}

// createSessions creates n sessions in namespace "ns" and returns refs.
// They have titles, so that every append of user messages is a
// one-statement append (an untitled session's first user message takes
// the general path, which derives its title).
func createSessions(t *testing.T, s *storage.Store, n int) []storage.Ref {
	t.Helper()
	refs := make([]storage.Ref, n)
	for i := range refs {
		se, err := s.Create(t.Context(), storage.CreateRequest{Namespace: "ns", Title: "group commit"})
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = storage.Ref{Namespace: "ns", ID: se.ID}
	}
	return refs
}

// TestGroupCommitConcurrent: many clients appending to many sessions at
// once (their appends share transactions) each get their append
// acknowledged once, at a revision of its own, every message is stored
// exactly once and in the order of those revisions, and watchers see every
// change in order.
func TestGroupCommitConcurrent(t *testing.T) {
	d := appendConcurrently(t, 8, 24, 8)
	if postgres.Grouped(d) == 0 {
		t.Errorf("no append was written in a batch of two or more: the test did not exercise the group commit")
	}
}

// TestGroupCommitSecondBatch: while a batch is written, the appends that
// wait for it are written by a second batch beside it once there are
// enough of them (many clients), never while there are few (as many
// clients as a batch holds); two batches in flight that name the same
// sessions still give each append its own revision, in the order the
// session's watchers see, and lose none.
func TestGroupCommitSecondBatch(t *testing.T) {
	if d := appendConcurrently(t, 8, 64, 6); postgres.MostBatchesInFlight(d) != 2 {
		t.Errorf("64 clients on 8 sessions: at most %d batch(es) in flight at once, want 2", postgres.MostBatchesInFlight(d))
	}
	if d := appendConcurrently(t, 8, 8, 24); postgres.MostBatchesInFlight(d) != 1 {
		t.Errorf("8 clients on 8 sessions: %d batches in flight at once, want 1 (too few appends wait for a second)", postgres.MostBatchesInFlight(d))
	}
}

// appendConcurrently has clients goroutines append perClient messages
// each, client c's k-th to session (c+k) mod sessions of a new schema,
// and checks that every acknowledged append holds its own revision of its
// session, in that order in the session and in its watchers' events. It
// returns the driver that wrote them.
func appendConcurrently(t *testing.T, sessions, clients, perClient int) *postgres.Store {
	d, s := openDriver(t, pgtest.Schema(t), 8)
	ctx := t.Context()
	refs := createSessions(t, s, sessions)
	subs := make([]*storage.Subscription, sessions)
	for i, ref := range refs {
		sub, err := s.Watch(ctx, ref, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[i] = sub
	}
	type ack struct {
		session int
		rev     uint64
		id      string
	}
	acks := make(chan ack, clients*perClient)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perClient {
				i := (c + k) % sessions
				id := fmt.Sprintf("c%d-%d", c, k)
				res, err := s.Append(ctx, storage.AppendRequest{Ref: refs[i], Messages: []*sessiondv1.Message{userMsg(id)}})
				if err != nil {
					t.Errorf("Append %s: %v", id, err)
					return
				}
				acks <- ack{i, res.Revision, id}
			}
		}()
	}
	wg.Wait()
	close(acks)
	if t.Failed() {
		return d
	}
	// Revision r of session i appended byRev[i][r].
	byRev := make([]map[uint64]string, sessions)
	for i := range byRev {
		byRev[i] = map[uint64]string{}
	}
	for a := range acks {
		if prev, dup := byRev[a.session][a.rev]; dup {
			t.Errorf("session %d: revision %d acknowledged to both %s and %s", a.session, a.rev, prev, a.id)
		}
		byRev[a.session][a.rev] = a.id
	}
	for i, ref := range refs {
		n := len(byRev[i])
		_, msgs, err := s.Load(ctx, ref, storage.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != n {
			t.Errorf("session %d holds %d messages; %d appends were acknowledged", i, len(msgs), n)
			continue
		}
		for k, m := range msgs {
			if want := byRev[i][uint64(k+2)]; m.GetId() != want || m.GetContent() != "content of "+want {
				t.Errorf("session %d message %d is %q (%q); the append acknowledged at revision %d was %q", i, k, m.GetId(), m.GetContent(), k+2, want)
			}
		}
		for k := range n {
			var ev storage.Event
			select {
			case ev = <-subs[i].Events():
			case <-time.After(10 * time.Second):
				t.Fatalf("session %d: event %d of %d did not arrive: %v", i, k, n, subs[i].Err())
			}
			want := byRev[i][uint64(k+2)]
			if ev.Revision != uint64(k+2) || ev.Type != storage.EventAppended || len(ev.Messages) != 1 || ev.Messages[0].GetId() != want {
				t.Errorf("session %d: event %d is revision %d type %v with %d messages; want revision %d appending %q", i, k, ev.Revision, ev.Type, len(ev.Messages), k+2, want)
			}
		}
	}
	return d
}

// TestGroupCommitBatch: one batch holding appends that succeed, conflict,
// repeat each other and miss: each gets what it would get alone, in queue
// order, and the others commit.
func TestGroupCommitBatch(t *testing.T) {
	d, s := openDriver(t, pgtest.Schema(t), 4)
	ctx := t.Context()
	refs := createSessions(t, s, 4)
	a, b, c, e := refs[0], refs[1], refs[2], refs[3]
	for _, p := range []struct {
		ref storage.Ref
		id  string
	}{{c, "c1"}, {e, "e1"}} {
		if _, err := s.Append(ctx, storage.AppendRequest{Ref: p.ref, Messages: []*sessiondv1.Message{userMsg(p.id)}}); err != nil {
			t.Fatal(err)
		}
	}
	missing := storage.Ref{Namespace: "ns", ID: "0193a5f0-0000-7000-8000-000000000000"}
	cases := []struct {
		name     string
		ref      storage.Ref
		expected uint64
		msgs     []*sessiondv1.Message
		wantRev  uint64
		wantErr  error
	}{
		{"new on a", a, 0, []*sessiondv1.Message{userMsg("a1")}, 2, nil},
		{"stale expected revision on b", b, 5, []*sessiondv1.Message{userMsg("b1")}, 0, storage.ErrConflict},
		{"second on a, expecting the first", a, 2, []*sessiondv1.Message{userMsg("a2"), userMsg("a3")}, 3, nil},
		{"stored and new ids mixed on c: only the new stored", c, 0, []*sessiondv1.Message{userMsg("c1"), userMsg("c2")}, 3, nil},
		{"retry of a stored append on e", e, 0, []*sessiondv1.Message{userMsg("e1")}, 2, nil},
		{"retry of the first on a in the same batch", a, 0, []*sessiondv1.Message{userMsg("a1")}, 3, nil},
		{"new on b", b, 0, []*sessiondv1.Message{userMsg("b2")}, 2, nil},
		{"stale expected revision on a after the batch's own", a, 2, []*sessiondv1.Message{userMsg("a4")}, 0, storage.ErrConflict},
		{"no such session", missing, 0, []*sessiondv1.Message{userMsg("x")}, 0, storage.ErrNotFound},
		{"same id, other content on c", c, 0, []*sessiondv1.Message{{Id: "c1", Role: sessiondv1.Role_ROLE_USER, Content: "else"}}, 0, storage.ErrMessageConflict},
	}
	release := postgres.HoldAppends(t, d)
	type result struct {
		rev uint64
		err error
	}
	results := make([]chan result, len(cases))
	for i, tc := range cases {
		results[i] = make(chan result, 1)
		go func() {
			res, err := s.Append(ctx, storage.AppendRequest{Ref: tc.ref, ExpectedRevision: tc.expected, Messages: tc.msgs})
			results[i] <- result{res.Revision, err}
		}()
		// Queue them in this order.
		postgres.WaitQueued(t, d, i+1)
	}
	release(len(cases))
	for i, tc := range cases {
		r := <-results[i]
		switch {
		case tc.wantErr != nil && !errors.Is(r.err, tc.wantErr):
			t.Errorf("%s: error %v; want %v", tc.name, r.err, tc.wantErr)
		case tc.wantErr == nil && (r.err != nil || r.rev != tc.wantRev):
			t.Errorf("%s: revision %d, error %v; want revision %d", tc.name, r.rev, r.err, tc.wantRev)
		}
	}
	for _, w := range []struct {
		ref storage.Ref
		ids []string
		rev uint64
	}{{a, []string{"a1", "a2", "a3"}, 3}, {b, []string{"b2"}, 2}, {c, []string{"c1", "c2"}, 3}, {e, []string{"e1"}, 2}} {
		se, msgs, err := s.Load(ctx, w.ref, storage.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.GetId())
		}
		if fmt.Sprint(ids) != fmt.Sprint(w.ids) || se.Revision != w.rev {
			t.Errorf("session %s: messages %v at revision %d; want %v at %d", w.ref.ID, ids, se.Revision, w.ids, w.rev)
		}
	}
	if postgres.Grouped(d) < uint64(len(cases)) {
		t.Errorf("%d appends written in batches; want the held %d", postgres.Grouped(d), len(cases))
	}
}

// TestGroupCommitStatementFails: a statement of a batch that PostgreSQL
// refuses (here: the lock timeout, because another writer holds a
// session's row lock for longer, and then stores one of the batch's ids)
// rolls back the batch; every append of it is then written alone and
// acknowledged once.
func TestGroupCommitStatementFails(t *testing.T) {
	dsn := pgtest.Schema(t)
	d, s := openDriver(t, dsn, 4)
	ctx := t.Context()
	refs := createSessions(t, s, 3)
	// Another writer: holds x's row lock and stores "dup" in it, as a
	// concurrent append of the same message would.
	conn := connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	x := refs[1]
	body, err := proto.Marshal(userMsg("dup"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET revision = revision + 1, message_count = message_count + 1 WHERE id = $1`, x.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO messages (session_id, pos, msg_id, body) VALUES ($1, 0, 'dup', $2)`, x.ID, body); err != nil {
		t.Fatal(err)
	}
	release := postgres.HoldAppends(t, d)
	ids := []string{"first", "dup", "last"}
	errs := make(chan error, len(ids))
	for i, id := range ids {
		go func() {
			_, err := s.Append(ctx, storage.AppendRequest{Ref: refs[i], Messages: []*sessiondv1.Message{userMsg(id)}})
			errs <- err
		}()
	}
	release(len(ids))
	// The batch times out on x's row lock, x's append alone waits for
	// it; then the other writer commits.
	mon := connect(t, dsn)
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH s AS%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch never waited for the row lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Errorf("Append: %v", err)
		}
	}
	for i, id := range ids {
		var n int
		if err := mon.QueryRow(ctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND msg_id = $2`, refs[i].ID, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("message %q stored %d times; want once", id, n)
		}
	}
	for i := range ids {
		se, err := s.Get(ctx, refs[i])
		if err != nil {
			t.Fatal(err)
		}
		if se.Revision != 2 || se.MessageCount != 1 {
			t.Errorf("session %d: revision %d, %d messages; want 2 and 1", i, se.Revision, se.MessageCount)
		}
	}
}

// TestGroupCommitQueuedCancel: an append whose caller gives up while it
// waits behind the batch in flight returns the context's error at once,
// unwritten, and the appends queued with it are written as usual.
func TestGroupCommitQueuedCancel(t *testing.T) {
	d, s := openDriver(t, pgtest.Schema(t), 4)
	ctx := t.Context()
	refs := createSessions(t, s, 2)
	release := postgres.HoldAppends(t, d)
	kept := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, storage.AppendRequest{Ref: refs[0], Messages: []*sessiondv1.Message{userMsg("kept")}})
		kept <- err
	}()
	postgres.WaitQueued(t, d, 1)
	gctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := s.Append(gctx, storage.AppendRequest{Ref: refs[1], Messages: []*sessiondv1.Message{userMsg("gave-up")}})
		gaveUp <- err
	}()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Append whose deadline passed while queued: %v; want %v", err, context.DeadlineExceeded)
		}
	case <-time.After(10 * time.Second):
		release(2) // so that the store can close
		<-gaveUp
		t.Fatal("an append whose deadline passed while queued did not return until its batch was written")
	}
	if n := postgres.Queued(d); n != 1 {
		t.Errorf("%d appends queued after one gave up; want 1", n)
	}
	release(1)
	if err := <-kept; err != nil {
		t.Fatalf("Append queued beside the one that gave up: %v", err)
	}
	for i, want := range []uint64{2, 1} {
		se, err := s.Get(ctx, refs[i])
		if err != nil {
			t.Fatal(err)
		}
		if se.Revision != want {
			t.Errorf("session %d at revision %d; want %d", i, se.Revision, want)
		}
	}
}

// lockSession holds ref's row lock in a transaction of another connection,
// as a long write of another replica would, until the returned function
// commits it.
func lockSession(t *testing.T, dsn string, ref storage.Ref) (commit func()) {
	t.Helper()
	tx, err := connect(t, dsn).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, ref.ID); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// appendAsync appends one message with id to ref and delivers the result.
func appendAsync(ctx context.Context, s *storage.Store, ref storage.Ref, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{userMsg(id)}})
		done <- err
	}()
	return done
}

// waitLockWaiters waits (at most 10 s) until n append statements wait for
// a row lock.
func waitLockWaiters(t *testing.T, dsn string, n int) {
	t.Helper()
	waitBackends(t, dsn, `wait_event_type = 'Lock' AND query LIKE 'WITH s AS%'`, n, "append statements waiting for a row lock")
}

// waitBackends waits (at most 10 s) until n of the server's backends
// match where, a condition on pg_stat_activity; what names them.
func waitBackends(t *testing.T, dsn, where string, n int, what string) {
	t.Helper()
	mon := connect(t, dsn)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var got int
		if err := mon.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE `+where).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s after 10 s; want %d", got, what, n)
		}
	}
}

// checkRevisions checks each session's revision.
func checkRevisions(t *testing.T, s *storage.Store, refs []storage.Ref, want ...uint64) {
	t.Helper()
	for i, w := range want {
		se, err := s.Get(t.Context(), refs[i])
		if err != nil {
			t.Fatal(err)
		}
		if se.Revision != w {
			t.Errorf("session %d at revision %d; want %d", i, se.Revision, w)
		}
	}
}

// TestGroupCommitLockedSessionAlone: an append written alone that waits
// for a session's row lock, held by another transaction, does not hold up
// the appends to other sessions that arrive meanwhile.
func TestGroupCommitLockedSessionAlone(t *testing.T) {
	dsn := pgtest.Schema(t)
	_, s := openDriver(t, dsn, 4)
	refs := createSessions(t, s, 2)
	commit := lockSession(t, dsn, refs[0])
	locked := appendAsync(t.Context(), s, refs[0], "locked")
	waitLockWaiters(t, dsn, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := <-appendAsync(ctx, s, refs[1], "free")
	commit()
	if err != nil {
		t.Errorf("an append to a free session while another waits for a row lock: %v", err)
	}
	if err := <-locked; err != nil {
		t.Errorf("the append that waited for the row lock: %v", err)
	}
	checkRevisions(t, s, refs, 2, 2)
}

// TestGroupCommitLockedSessionInBatch: a batch holding an append to a
// session whose row lock another transaction holds gives up on the lock;
// its other appends are written while that one waits alone.
func TestGroupCommitLockedSessionInBatch(t *testing.T) {
	dsn := pgtest.Schema(t)
	d, s := openDriver(t, dsn, 4)
	refs := createSessions(t, s, 3)
	commit := lockSession(t, dsn, refs[0])
	release := postgres.HoldAppends(t, d)
	locked := appendAsync(t.Context(), s, refs[0], "locked")
	free := []<-chan error{appendAsync(t.Context(), s, refs[1], "free1"), appendAsync(t.Context(), s, refs[2], "free2")}
	release(3)
	timeout := time.After(5 * time.Second)
	for i, done := range free {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("append %d of the batch, to a free session: %v", i+1, err)
			}
		case <-timeout:
			commit()
			t.Fatalf("append %d of the batch, to a free session, still waits after 5 s for the locked session", i+1)
		}
	}
	waitLockWaiters(t, dsn, 1)
	commit()
	if err := <-locked; err != nil {
		t.Errorf("the append that waited for the row lock: %v", err)
	}
	checkRevisions(t, s, refs, 2, 2, 2)
}

// TestGroupCommitStatementsPerBatch: a batch of appends to distinct
// sessions, named by id or by alias, is written with the same statements
// whether it holds 2 appends or 32, and each append is stored.
func TestGroupCommitStatementsPerBatch(t *testing.T) {
	d, s := openDriver(t, pgtest.Schema(t), 4)
	ctx := t.Context()
	var perBatch []uint64
	for _, n := range []int{2, 32} {
		refs := make([]storage.Ref, n)
		for i := range refs {
			alias := fmt.Sprintf("batch-%d-%d", n, i)
			se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "batch", Alias: alias})
			if err != nil {
				t.Fatal(err)
			}
			refs[i] = storage.Ref{Namespace: "ns", ID: se.ID}
			if i%2 == 1 {
				refs[i] = storage.Ref{Namespace: "ns", Alias: alias}
			}
		}
		before, grouped := postgres.Statements(d), postgres.Grouped(d)
		release := postgres.HoldAppends(t, d)
		errs := make(chan error, n)
		for i, ref := range refs {
			go func() {
				_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, ExpectedRevision: 1,
					Messages: []*sessiondv1.Message{userMsg(fmt.Sprint("m", i)), userMsg(fmt.Sprint("n", i))}})
				errs <- err
			}()
		}
		release(n)
		for range refs {
			if err := <-errs; err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		if got := postgres.Grouped(d) - grouped; got != uint64(n) {
			t.Fatalf("batch of %d: %d appends written in batches; want all", n, got)
		}
		perBatch = append(perBatch, postgres.Statements(d)-before)
		for i, ref := range refs {
			se, msgs, err := s.Load(ctx, ref, storage.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if se.Revision != 2 || len(msgs) != 2 || msgs[0].GetId() != fmt.Sprint("m", i) || msgs[1].GetId() != fmt.Sprint("n", i) {
				t.Errorf("batch of %d, session %d: revision %d, %d messages; want revision 2 with m%d, n%d", n, i, se.Revision, len(msgs), i, i)
			}
		}
	}
	if perBatch[0] != perBatch[1] {
		t.Errorf("statements per batch: %d for 2 appends, %d for 32; want the same", perBatch[0], perBatch[1])
	}
}

// TestGroupCommitIDAndAlias: two appends of one batch naming one session,
// one by id and one by alias, are both written, one after the other.
func TestGroupCommitIDAndAlias(t *testing.T) {
	d, s := openDriver(t, pgtest.Schema(t), 4)
	ctx := t.Context()
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "batch", Alias: "both"})
	if err != nil {
		t.Fatal(err)
	}
	refs := []storage.Ref{{Namespace: "ns", ID: se.ID}, {Namespace: "ns", Alias: "both"}}
	release := postgres.HoldAppends(t, d)
	revs := make(chan uint64, len(refs))
	for i, ref := range refs {
		go func() {
			res, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{userMsg(fmt.Sprint("m", i))}})
			if err != nil {
				t.Errorf("Append: %v", err)
			}
			revs <- res.Revision
		}()
	}
	release(len(refs))
	if a, b := <-revs, <-revs; a+b != 2+3 || a == b {
		t.Errorf("revisions %d and %d; want 2 and 3", a, b)
	}
	got, msgs, err := s.Load(ctx, refs[0], storage.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 3 || len(msgs) != 2 {
		t.Errorf("revision %d with %d messages; want 3 with 2", got.Revision, len(msgs))
	}
}

// TestGroupCommitGathers: after a batch of n appends, a leader holding
// fewer (the first append to come back, or a batch queued meanwhile)
// waits for n in all and writes them in one batch, or, when fewer come,
// writes those that did once the last batch's write time has passed;
// after a batch of one, an append is written at once.
func TestGroupCommitGathers(t *testing.T) {
	d, s := openDriver(t, pgtest.Schema(t), 4)
	ctx := t.Context()
	refs := createSessions(t, s, 4)
	appendAll := func(refs []storage.Ref, tag string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(refs))
		for i, ref := range refs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{userMsg(fmt.Sprintf("%s-%d", tag, i))}})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	written := func() (uint64, uint64) { return postgres.Batches(d), postgres.Grouped(d) }

	// All four back, one by one: one batch, long before the wait's end.
	postgres.SetGather(d, 4, time.Minute)
	b0, g0 := written()
	start := time.Now()
	appendAll(refs, "all")
	if b, g := written(); b-b0 != 1 || g-g0 != 4 || time.Since(start) > 30*time.Second {
		t.Errorf("4 appends after a batch of 4: %d batches holding %d appends in %v; want 1 holding 4 at once", b-b0, g-g0, time.Since(start))
	}

	// A batch of one handed on (queued while another was written) waits
	// for the three others too.
	postgres.SetGather(d, 4, time.Minute)
	b0, g0 = written()
	release := postgres.HoldAppends(t, d)
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendAll(refs[:1], "handed")
	}()
	release(1)
	appendAll(refs[1:], "handed")
	<-done
	if b, g := written(); b-b0 != 1 || g-g0 != 4 {
		t.Errorf("1 append handed on, then 3: %d batches holding %d appends; want 1 holding 4", b-b0, g-g0)
	}

	// Two of four back: written together once the wait is over.
	postgres.SetGather(d, 4, 200*time.Millisecond)
	b0, g0 = written()
	start = time.Now()
	appendAll(refs[:2], "two")
	if b, g := written(); b-b0 != 1 || g-g0 != 2 || time.Since(start) < 200*time.Millisecond {
		t.Errorf("2 appends after a batch of 4: %d batches holding %d appends in %v; want 1 holding 2 after the wait", b-b0, g-g0, time.Since(start))
	}

	// After a batch of one, no wait.
	postgres.SetGather(d, 1, time.Minute)
	start = time.Now()
	appendAll(refs[:1], "one")
	if time.Since(start) > 30*time.Second {
		t.Errorf("an append after a batch of one took %v: it waited for others", time.Since(start))
	}
}

// TestFlushObserver: the flush observer hears of every append the group
// commit makes durable, once, with its message's bytes: its records add up
// to the appends acknowledged, and a retried append that changed nothing
// is not counted again.
func TestFlushObserver(t *testing.T) {
	var (
		mu      sync.Mutex
		records []storage.FlushRecord
	)
	_, s, err := postgres.OpenDriver(t.Context(), pgtest.Schema(t), postgres.Options{MaxConns: 8, MinConns: 1,
		OnFlush: func(r storage.FlushRecord) {
			mu.Lock()
			records = append(records, r)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	const sessions, clients, perClient = 4, 8, 5
	refs := createSessions(t, s, sessions)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for k := range perClient {
				m := userMsg(fmt.Sprintf("c%d-%d", c, k))
				if _, err := s.Append(ctx, storage.AppendRequest{Ref: refs[(c+k)%sessions], Messages: []*sessiondv1.Message{m}}); err != nil {
					t.Errorf("Append: %v", err)
				}
			}
		})
	}
	wg.Wait()
	// A retry of a stored append stores nothing: no flush.
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: refs[0], Messages: []*sessiondv1.Message{userMsg("c0-0")}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	appends, bytes := 0, int64(0)
	for _, r := range records {
		if r.Appends < 1 || r.Bytes <= 0 || r.Latency <= 0 {
			t.Errorf("record %+v; want at least one append, its bytes and a latency", r)
		}
		appends += r.Appends
		bytes += r.Bytes
	}
	if appends != clients*perClient {
		t.Errorf("flushes made %d appends durable; want %d", appends, clients*perClient)
	}
	if minBytes := int64(clients * perClient * len("content of c0-0")); bytes < minBytes {
		t.Errorf("flushes wrote %d bytes; want at least %d (the contents)", bytes, minBytes)
	}
}

// TestGroupCommitReadsSessionsByKey: on a new schema, whose statistics say
// the sessions table is all but empty, a group commit's statements still
// reach each session's row by its key. A plan that scanned the table
// would read every dead row version the appends leave until vacuum: more
// with each append.
func TestGroupCommitReadsSessionsByKey(t *testing.T) {
	dsn := pgtest.Schema(t)
	conn := connect(t, dsn)
	// sessionStats waits until the sessions table's counters show at least
	// inserts row inserts and updates row updates (a closed Store's
	// connections report theirs as they end, after Close returns) and
	// returns its sequential scans.
	sessionStats := func(inserts, updates int64) (seqScans int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var ins, upd int64
			if err := conn.QueryRow(t.Context(), `SELECT pg_stat_clear_snapshot(), seq_scan, n_tup_ins, n_tup_upd
				FROM pg_stat_user_tables WHERE relid = 'sessions'::regclass`).Scan(nil, &seqScans, &ins, &upd); err != nil {
				t.Fatal(err)
			}
			if ins >= inserts && upd >= updates {
				return seqScans
			}
			if time.Now().After(deadline) {
				t.Fatalf("sessions shows %d row inserts and %d updates, want %d and %d", ins, upd, inserts, updates)
			}
		}
	}
	// The migrations scan sessions (each index they build is a scan), on
	// the one connection that then creates the sessions: once its inserts
	// are counted, so are those scans, and the baseline holds them.
	_, setup := openDriver(t, dsn, 1)
	refs := createSessions(t, setup, 16)
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}
	before := sessionStats(int64(len(refs)), 0)

	d, s := openDriver(t, dsn, 4)
	const each = 50
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() {
			for k := range each {
				if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref,
					Messages: []*sessiondv1.Message{userMsg(fmt.Sprintf("m-%d-%d", i, k))}}); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	batches := postgres.Batches(d)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	scans := sessionStats(int64(len(refs)), int64(len(refs)*each)) - before
	if batches < 20 {
		t.Fatalf("%d batches of two or more appends; the test needs at least 20", batches)
	}
	if scans > int64(batches)/4 {
		t.Errorf("%d sequential scans of sessions while %d batches wrote %d appends; want the rows read by key", scans, batches, len(refs)*each)
	}
}

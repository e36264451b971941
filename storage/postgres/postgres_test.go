package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
	"github.com/sessiond/sessiond/storage/storetest"
)

func TestConformance(t *testing.T) {
	pgtest.ServerDSN(t)
	storetest.RunConformance(t, storetest.Harness{
		NewData: func(t *testing.T) string { return pgtest.Schema(t) },
		Open: func(ctx context.Context, dsn string) (*storage.Store, error) {
			return postgres.Open(ctx, dsn, postgres.Options{MaxConns: 4, MinConns: 1})
		},
		Shared: true, // many daemons on one database
	})
}

// open opens a store on dsn, closed when the test ends.
func open(t testing.TB, dsn string) *storage.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// connect opens a plain connection to dsn, closed when the test ends.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestNewerSchema: a database migrated by a newer sessiond is refused at
// start-up, never downgraded.
func TestNewerSchema(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	conn := connect(t, dsn)
	if _, err := conn.Exec(t.Context(), "UPDATE schema_migrations SET version = $1", postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(t.Context(), dsn, postgres.Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than the version") {
		t.Fatalf("Open on a newer schema: %v; want an error saying the schema is newer", err)
	}
}

// TestSchemaVersionInOwnSchema: a store migrates the first schema of its
// search_path and reads its version there, even when a later schema holds
// another sessiond's tables (here a newer one's).
func TestSchemaVersionInOwnSchema(t *testing.T) {
	mine, other := pgtest.Schema(t), pgtest.Schema(t)
	open(t, other)
	if _, err := connect(t, other).Exec(t.Context(), "UPDATE schema_migrations SET version = $1", postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	var first, second string
	if err := connect(t, mine).QueryRow(t.Context(), "SELECT current_schema()").Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := connect(t, other).QueryRow(t.Context(), "SELECT current_schema()").Scan(&second); err != nil {
		t.Fatal(err)
	}
	s := open(t, pgtest.WithParam(mine, "search_path", first+","+second+",public"))
	if _, err := s.Create(t.Context(), storage.CreateRequest{Namespace: "n"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, mine).QueryRow(t.Context(), "SELECT count(*) FROM "+first+".sessions").Scan(&n); err != nil || n != 1 {
		t.Fatalf("sessions in the store's own schema: %d, %v; want 1", n, err)
	}
}

// TestIdleTransactionsEnd: the driver's connections let PostgreSQL end a
// transaction that idles 30 s (a replica frozen while it holds row locks
// would otherwise hold up the others' writes), unless the DSN sets the
// parameter itself.
func TestIdleTransactionsEnd(t *testing.T) {
	dsn := pgtest.Schema(t)
	for _, c := range []struct{ dsn, want string }{
		{dsn, "30s"},
		{pgtest.WithParam(dsn, "idle_in_transaction_session_timeout", "2s"), "2s"},
	} {
		d, s, err := postgres.OpenDriver(t.Context(), c.dsn, postgres.Options{MaxConns: 2, MinConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := postgres.Setting(t.Context(), d, "idle_in_transaction_session_timeout")
		_ = s.Close()
		if err != nil || got != c.want {
			t.Errorf("idle_in_transaction_session_timeout = %q, %v; want %q", got, err, c.want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                         "postgres://u@h/db",
		"host=h user=u password=pw dbname=db":       "host=h user=u password=xxxxx dbname=db",
	} {
		if got := postgres.Redact(in); got != want || strings.Contains(got, "pw@") {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := postgres.Open(t.Context(), "postgres://u:s3cret@h:notaport/db", postgres.Options{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open on a bad DSN: %v; want an error without the password", err)
	}
}

// BenchmarkList100k lists 100,000 sessions of one namespace, in the list
// order, through the portable store (keyset pages of the list index).
func BenchmarkList100k(b *testing.B) {
	const n = 100_000
	dsn := pgtest.Schema(b)
	s := open(b, dsn)
	conn := connect(b, dsn)
	// Seed with one statement: rows as the driver writes them.
	metas := make([][]byte, n)
	for i := range metas {
		metas[i] = postgres.EncodeMeta(&storage.Session{Title: fmt.Sprint("session ", i+1), Labels: map[string]string{"team": "a"}})
	}
	if _, err := conn.Exec(b.Context(), `WITH x AS (
			INSERT INTO sessions (id, namespace, alias, created_ns, updated_ns, revision, message_count, meta)
			SELECT gen_random_uuid(), 'bench', 'alias-' || i, 1700000000000000000 + i, 1700000000000000000 + i * 1000, 1, 0, t.meta
			FROM unnest($1::bytea[]) WITH ORDINALITY AS t(meta, i)
			RETURNING id, alias
		)
		INSERT INTO session_filters (id, label_pairs, models, meta_search) SELECT id, '{}', '{}', 'session ' || substr(alias, 7) FROM x`, metas); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(b.Context(), "ANALYZE sessions, session_filters"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got := 0
		if err := s.List(b.Context(), storage.ListOptions{Namespace: "bench"}, func(*storage.Session) error {
			got++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("listed %d sessions, want %d", got, n)
		}
	}
}

// TestSearchUsesIndexes: the indexes serve search's substring filters: a
// session's message signatures are read through its key, and session
// metadata through the trigram index.
func TestSearchUsesIndexes(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	conn := connect(t, dsn)
	if _, err := conn.Exec(t.Context(), "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	msgs, msgArgs := postgres.MessageSearch("Weather in Paris")
	for _, c := range []struct {
		query   string
		args    []any
		indexes []string
	}{
		{"SELECT 1 FROM message_search m WHERE m.session_id = '0190a000-0000-7000-8000-0000000000a5' AND " + msgs, msgArgs, []string{"message_search_pkey"}},
		{"SELECT 1 FROM session_filters WHERE " + postgres.MetaSearched + " AND meta_search LIKE '%weather in paris%'", nil, []string{"sessions_search"}},
	} {
		rows, err := conn.Query(t.Context(), "EXPLAIN "+c.query, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n") + "\n"
		for _, index := range c.indexes {
			if !strings.Contains(plan, index) {
				t.Errorf("%s does not use %s:\n%s", c.query, index, plan)
			}
		}
	}
}

// TestFilterIndexes: the label and model filters use their indexes, which
// hold only the sessions that have labels or models (an append to a
// session without them writes no entry there), and the alias key still
// refuses a second session with one alias while many have none.
func TestFilterIndexes(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	for range 2 {
		if _, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns"}); err != nil {
			t.Fatalf("a second session without an alias: %v", err)
		}
	}
	if _, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Alias: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Alias: "a"}); !errors.Is(err, storage.ErrAliasInUse) {
		t.Fatalf("a second session with alias a: %v; want ErrAliasInUse", err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts  storage.ListOptions
		index string
	}{
		{storage.ListOptions{Namespace: "ns", Labels: map[string]string{"team": "a"}}, "sessions_labels"},
		{storage.ListOptions{Namespace: "ns", Model: "m-1"}, "sessions_models"},
	} {
		where, args := postgres.ListWhere(c.opts, nil)
		// Without the namespace condition, which the list order's index
		// serves as well (in a table this small, better).
		where = strings.Replace(where, "namespace = $1", "$1::text <> ''", 1)
		rows, err := conn.Query(ctx, "EXPLAIN SELECT 1 FROM sessions WHERE "+where, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(lines, "\n"); !strings.Contains(plan, c.index) {
			t.Errorf("%s does not use %s:\n%s", where, c.index, plan)
		}
	}
	for _, c := range []struct{ index, pred string }{
		{"sessions_labels", "label_pairs <> '{}'::bytea[]"},
		{"sessions_models", "models <> '{}'::text[]"},
		{"sessions_namespace_alias_key", "alias IS NOT NULL"},
	} {
		var pred string
		if err := conn.QueryRow(ctx, `SELECT coalesce(pg_get_expr(indpred, indrelid), '') FROM pg_index WHERE indexrelid = $1::regclass`, c.index).Scan(&pred); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(pred, c.pred) {
			t.Errorf("%s is for rows where %q; want %q", c.index, pred, c.pred)
		}
	}
}

// TestSearchLongAndShort: a message longer than messages_search indexes is
// still found (through messages_long), and so is a query too short to have
// a trigram; a word of the query may continue in the text on either side.
// The hits are the same before the indexer reaches the messages and after.
func TestSearchLongAndShort(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	var long strings.Builder
	for i := 0; long.Len() < 200_000; i++ {
		fmt.Fprintf(&long, "w%x ", i*7919) // varied words, far past the 65,536 characters indexed
	}
	long.WriteString("the needle at the end")
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Messages: []*sessiondv1.Message{
		{Id: "short", Role: sessiondv1.Role_ROLE_USER, Content: "Sunny weather in Paris today"},
		{Id: "long", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: long.String()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, indexed := range []bool{false, true} {
		if indexed {
			waitIndexed(t, dsn, 10*time.Second)
		}
		for query, want := range map[string][]int64{
			"needle at":         {1},
			"EATHER IN PAR":     {0},
			"ny":                {0},
			"y weather in pari": {0},
			"weather in berlin": nil,
		} {
			var got []int64
			if err := s.Search(ctx, storage.SearchOptions{Namespace: "ns", Query: query}, func(h storage.SearchHit) error {
				if h.Session.ID != se.ID {
					t.Errorf("Search %q: a hit in session %s", query, h.Session.ID)
				}
				got = append(got, h.MessageIndex)
				return nil
			}); err != nil {
				t.Fatalf("Search %q: %v", query, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Search %q (indexed: %v): hits at %v, want %v", query, indexed, got, want)
			}
		}
	}
}

// TestWatchReplayAfterRewrite: an append's event names its messages by
// position, so a replay of history after a rewind and a save (which rewrite
// those positions) must still deliver what each append added, not what
// sits at its positions now.
func TestWatchReplayAfterRewrite(t *testing.T) {
	s := open(t, pgtest.Schema(t))
	ctx := t.Context()
	msg := func(id string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: "content of " + id}
	}
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	appendIDs := func(ids ...string) {
		t.Helper()
		req := storage.AppendRequest{Ref: ref}
		for _, id := range ids {
			req.Messages = append(req.Messages, msg(id))
		}
		if _, err := s.Append(ctx, req); err != nil {
			t.Fatalf("Append %v: %v", ids, err)
		}
	}
	appendIDs("a")                                                                             // revision 2
	appendIDs("b", "c")                                                                        // 3
	if _, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref, MessageCount: 1}); err != nil { // 4
		t.Fatal(err)
	}
	appendIDs("d")                                                                                                                       // 5, at the position c had
	if _, err := s.Save(ctx, storage.SaveRequest{Ref: ref, Messages: []*sessiondv1.Message{msg("x"), msg("y"), msg("z")}}); err != nil { // 6
		t.Fatal(err)
	}
	appendIDs("e") // 7
	sub, err := s.Watch(ctx, ref, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := []struct {
		typ storage.EventType
		ids string
	}{{storage.EventAppended, "a"}, {storage.EventAppended, "b c"}, {storage.EventReplaced, ""},
		{storage.EventAppended, "d"}, {storage.EventReplaced, ""}, {storage.EventAppended, "e"}}
	for i, w := range want {
		var ev storage.Event
		select {
		case ev = <-sub.Events():
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d did not arrive: %v", i, sub.Err())
		}
		var ids []string
		for _, m := range ev.Messages {
			if m.GetContent() != "content of "+m.GetId() {
				t.Errorf("revision %d: message %q has content %q", ev.Revision, m.GetId(), m.GetContent())
			}
			ids = append(ids, m.GetId())
		}
		if ev.Revision != uint64(i+2) || ev.Type != w.typ || strings.Join(ids, " ") != w.ids {
			t.Errorf("event %d: revision %d type %v messages %q; want revision %d type %v messages %q",
				i, ev.Revision, ev.Type, strings.Join(ids, " "), i+2, w.typ, w.ids)
		}
	}
}

// TestStats: the sessions counted, the tables' size and the pool's
// statistics.
func TestStats(t *testing.T) {
	s, err := postgres.Open(t.Context(), pgtest.Schema(t), postgres.Options{MaxConns: 4, MinConns: 1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for range 3 {
		if _, err := s.Create(t.Context(), storage.CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != 3 || st.DiskBytes <= 0 {
		t.Errorf("Sessions = %d, DiskBytes = %d; want 3 and > 0", st.Sessions, st.DiskBytes)
	}
	if p := st.Pool; p == nil || p.MaxConns != 4 || p.TotalConns < 1 || p.AcquireCount < 3 {
		t.Errorf("Pool = %+v; want 4 max conns, at least one open, at least 3 acquires", p)
	}
	if st.Cache != nil || st.Journals != nil {
		t.Errorf("Cache %+v, Journals %+v: want none for PostgreSQL", st.Cache, st.Journals)
	}
}

// TestStatsSizesEveryTable: the size Stats reports counts every table of
// the schema but tern's version table.
func TestStatsSizesEveryTable(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	rows, err := connect(t, dsn).Query(t.Context(), `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("tables: %v, %v", tables, err)
	}
	for _, table := range tables {
		if !strings.Contains(postgres.StatsQuery, "pg_total_relation_size('"+table+"'::regclass)") {
			t.Errorf("Stats does not size table %s", table)
		}
	}
}

// TestWatchReplayVersion1Events: events rows written by schema version 1
// hold the session as JSON and none of the columns version 2 added; a
// replay after the upgrade still decodes them.
func TestWatchReplayVersion1Events(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "now"})
	if err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	res, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Content: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	old := *se
	old.Title, old.Revision, old.MessageCount = "as version 1 wrote it", res.Revision, 1
	snap, err := json.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	// The append wrote no events row (its messages carry its revision):
	// write the one version 1 wrote, which a replay reads instead.
	if _, err := conn.Exec(ctx, `INSERT INTO events (session_id, revision, type, session, first_pos, count)
		VALUES ($1, $3, $4, $2, 0, 1)`, se.ID, snap, int64(res.Revision), int16(storage.EventAppended)); err != nil {
		t.Fatal(err)
	}
	sub, err := s.Watch(ctx, ref, se.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	select {
	case ev := <-sub.Events():
		if ev.Revision != res.Revision || ev.Type != storage.EventAppended || ev.Session.Title != old.Title ||
			ev.Session.MessageCount != 1 || len(ev.Messages) != 1 || ev.Messages[0].GetContent() != "hello" {
			t.Errorf("replayed %+v (session %+v); want the append of revision %d with the JSON session", ev, ev.Session, res.Revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no replay: %v", sub.Err())
	}
}

// TestCreateOverOrphanMessages: a daemon of schema version 1 deleted a
// session's messages through the foreign key version 2 dropped, so one
// still running during an upgrade leaves them behind; a create that reuses
// the session's id must not see them.
func TestCreateOverOrphanMessages(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	const id = "0190a000-0000-7000-8000-000000000001"
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `INSERT INTO messages (session_id, pos, msg_id, body) VALUES ($1, 0, 'orphan', '')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", ID: id, Messages: []*sessiondv1.Message{
		{Id: "fresh", Role: sessiondv1.Role_ROLE_USER, Content: "fresh"}}}); err != nil {
		t.Fatalf("Create over orphan messages: %v", err)
	}
	_, msgs, err := s.Load(ctx, storage.Ref{Namespace: "ns", ID: id}, storage.LoadOptions{})
	if err != nil || len(msgs) != 1 || msgs[0].GetId() != "fresh" {
		t.Fatalf("Load: %v, %v; want the one message created", msgs, err)
	}
}

// TestTallyOfOldRows: a session row written before schema version 3 (tally
// NULL, no models) answers an unknown tally until its next append, which
// recounts its messages, so that a result for a call made back then is
// accepted and the model filter finds the session again.
func TestTallyOfOldRows(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := open(t, dsn)
	ctx := t.Context()
	se, err := s.Create(ctx, storage.CreateRequest{Messages: []*sessiondv1.Message{
		{Id: "a1", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-1", Usage: &sessiondv1.Usage{InputTokens: 7},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1"}, {Id: "c2"}}},
		{Id: "r1", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// What migration 003 leaves in a row it did not write.
	if _, err := connect(t, dsn).Exec(ctx, `WITH f AS (UPDATE session_filters SET models = '{}' WHERE id = $1)
		UPDATE sessions SET tally = NULL WHERE id = $1`, se.ID); err != nil {
		t.Fatal(err)
	}
	ref := storage.Ref{ID: se.ID}
	got, err := s.Get(ctx, ref)
	if err != nil || !got.Unknown {
		t.Fatalf("old row: %+v, %v; want an unknown tally", got, err)
	}
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: "r2", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c2"}}}); err != nil {
		t.Fatalf("append of a result for a call made before the upgrade: %v", err)
	}
	got, err = s.Get(ctx, ref)
	if err != nil || got.Unknown || len(got.OpenToolCallIDs) != 0 || got.Usage.InputTokens != 7 || len(got.Models) != 1 {
		t.Fatalf("after the append: %+v, %v", got.Tally, err)
	}
	var n int
	if err := s.List(ctx, storage.ListOptions{Model: "m-1"}, func(*storage.Session) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("model filter after the recount: %d, %v", n, err)
	}
}

package postgres_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// lastReleasedSchema is the schema version of the last release: the one
// an upgrade starts from.
const lastReleasedSchema = 5

// seedReleased writes, with plain SQL as a sessiond of schema version 5
// did, a session in namespace "ns" titled "old" holding one user message
// ("hello there", id "m1") at revision 2, with its two events (the create
// and the append), and returns its id.
func seedReleased(t *testing.T, dsn string) string {
	t.Helper()
	const id = "0190a000-0000-7000-8000-0000000000a5"
	ctx := t.Context()
	meta := postgres.EncodeMeta(&storage.Session{Title: "old"})
	body, err := proto.Marshal(&sessiondv1.Message{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "hello there"})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now().Add(-time.Hour).UnixNano()
	conn := connect(t, dsn)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO sessions (id, namespace, created_ns, updated_ns, revision, message_count, meta, label_pairs, meta_search, tally)
			VALUES ($1, 'ns', $2::bigint, $2::bigint + 1000, 2, 1, $3, '{}', 'old', $4)`, []any{id, created, meta, []byte{}}},
		{`INSERT INTO messages (session_id, pos, msg_id, body, search) VALUES ($1, 0, 'm1', $2, 'hello there')`, []any{id, body}},
		{`INSERT INTO events (session_id, revision, type, namespace, created_ns, updated_ns, message_count, meta, tally)
			VALUES ($1, 1, $2, 'ns', $3, $3, 0, $4, $5)`, []any{id, int16(storage.EventUpdated), created, meta, []byte{}}},
		{`INSERT INTO events (session_id, revision, type, first_pos, count, namespace, created_ns, updated_ns, message_count, meta, tally)
			VALUES ($1, 2, $2, 0, 1, 'ns', $3::bigint, $3::bigint + 1000, 1, $4, $5)`, []any{id, int16(storage.EventAppended), created, meta, []byte{}}},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("seed the version %d schema: %v", lastReleasedSchema, err)
		}
	}
	return id
}

// TestUpgradeFromReleased: a database the last release wrote, data in it,
// opens migrated to the current schema: its session reads, replays,
// searches and takes live turns as a new one does.
func TestUpgradeFromReleased(t *testing.T) {
	dsn := pgtest.Schema(t)
	postgres.MigrateTo(t, dsn, lastReleasedSchema)
	id := seedReleased(t, dsn)
	s := open(t, dsn)
	ctx := t.Context()
	ref := storage.Ref{Namespace: "ns", ID: id}

	got, msgs, err := s.Load(ctx, ref, storage.LoadOptions{})
	if err != nil || got.Revision != 2 || got.Title != "old" || got.OpenMessageID != "" || len(msgs) != 1 || msgs[0].GetContent() != "hello there" {
		t.Fatalf("Load after the upgrade: %+v %v, %v", got, msgs, err)
	}
	sub, err := s.Watch(ctx, ref, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev := nextEvent(t, sub)
	if ev.Type != storage.EventAppended || ev.Revision != 2 || len(ev.Messages) != 1 || ev.Messages[0].GetId() != "m1" {
		t.Fatalf("replay of the old append: %v at %d with %v", ev.Type, ev.Revision, ev.Messages)
	}
	if n := hits(t, s, "hello"); n != 1 {
		t.Fatalf("search after the upgrade: %d hits", n)
	}
	// Indexed again since schema version 10, by the indexer: found by its
	// signature then.
	waitIndexed(t, dsn, 10*time.Second)
	var indexed, count int64
	if err := connect(t, dsn).QueryRow(ctx, `SELECT count(*), max(s.search_count) FROM message_search ms JOIN sessions s ON s.id = ms.session_id
		WHERE ms.session_id = $1`, id).Scan(&indexed, &count); err != nil || indexed != 1 || count != 1 {
		t.Fatalf("indexed messages after the upgrade: %d, search_count %d, %v", indexed, count, err)
	}
	if n := hits(t, s, "hello"); n != 1 {
		t.Fatalf("search after the message is indexed again: %d hits", n)
	}

	open := &sessiondv1.Message{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{open}}); err != nil {
		t.Fatalf("open a message in the old session: %v", err)
	}
	d, err := s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "a", Content: "hi"}})
	if err != nil || d.Revision != 4 || d.Length != 2 {
		t.Fatalf("AppendDelta: %+v, %v; want revision 4, length 2", d, err)
	}
	for _, want := range []storage.EventType{storage.EventAppended, storage.EventDelta} {
		if ev := nextEvent(t, sub); ev.Type != want {
			t.Fatalf("event %v, want %v", ev.Type, want)
		}
	}
	fin, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: "a"})
	if err != nil || !fin.Closed || fin.Message.GetContent() != "hi" {
		t.Fatalf("FinishMessage: %+v, %v", fin, err)
	}
	if got, err := s.Get(ctx, ref); err != nil || got.OpenMessageID != "" || got.MessageCount != 2 {
		t.Fatalf("after the finish: %+v, %v", got, err)
	}
}

// nextEvent returns sub's next event, failing the test after 10 s.
func nextEvent(t *testing.T, sub *storage.Subscription) storage.Event {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		if !ok {
			t.Fatalf("subscription ended: %v", sub.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return storage.Event{}
}

// TestUpgradeKeepsWatchHistory: the events rows a database holds before
// schema version 9 (which stopped writing one per plain append) still
// replay after the upgrade, in order with the appends after it that wrote
// none, each with its session as it was.
func TestUpgradeKeepsWatchHistory(t *testing.T) {
	dsn := pgtest.Schema(t)
	postgres.MigrateTo(t, dsn, lastReleasedSchema)
	id := seedReleased(t, dsn)
	postgres.MigrateTo(t, dsn, 8)
	s := open(t, dsn)
	ctx := t.Context()
	ref := storage.Ref{Namespace: "ns", ID: id}
	add := func(msgID string) {
		t.Helper()
		if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: msgID, Role: sessiondv1.Role_ROLE_USER, Content: msgID}}}); err != nil {
			t.Fatal(err)
		}
	}
	add("m2")                                                                                                                // revision 3
	if _, err := s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateSummary, Summary: "sum"}); err != nil { // 4
		t.Fatal(err)
	}
	add("m3") // 5
	if n := eventRows(t, dsn, id); n != 3 {
		t.Errorf("%d events rows, want 3: the released ones and the update's", n)
	}
	sub, err := s.Watch(ctx, ref, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, want := range []struct {
		typ     storage.EventType
		msg     string
		count   int64
		summary string
	}{{storage.EventAppended, "m1", 1, ""}, {storage.EventAppended, "m2", 2, ""}, {storage.EventUpdated, "", 2, "sum"}, {storage.EventAppended, "m3", 3, "sum"}} {
		ev := nextEvent(t, sub)
		var got string
		if len(ev.Messages) == 1 {
			got = ev.Messages[0].GetId()
		}
		if ev.Type != want.typ || got != want.msg || ev.Session.MessageCount != want.count || ev.Session.Summary != want.summary || ev.Session.Title != "old" {
			t.Fatalf("revision %d: %v with %q, session %+v; want %v with %q, %d messages, summary %q, title old",
				ev.Revision, ev.Type, got, ev.Session, want.typ, want.msg, want.count, want.summary)
		}
	}
}

// TestUpgradeMovesFilters: sessions stored under schema version 9, with
// and without labels, models, an alias and a title, keep their list
// order, filters, search and alias after the move of the filtered columns
// to session_filters (schema version 10), and later writes keep both
// tables in step.
func TestUpgradeMovesFilters(t *testing.T) {
	dsn := pgtest.Schema(t)
	postgres.MigrateTo(t, dsn, 9)
	ctx := t.Context()
	conn := connect(t, dsn)
	base := time.Now().Add(-time.Hour).UnixNano()
	seeds := []struct {
		id     string
		s      storage.Session
		models []string
	}{
		{"0190a000-0000-7000-8000-00000000000a", storage.Session{Title: "Weather in Paris", Alias: "wx", Labels: map[string]string{"team": "a"}}, []string{"m-1"}},
		{"0190a000-0000-7000-8000-00000000000b", storage.Session{}, []string{}},
		{"0190a000-0000-7000-8000-00000000000c", storage.Session{Summary: "trip to Rome", Labels: map[string]string{"team": "b"}}, []string{"m-2"}},
	}
	for i, sd := range seeds {
		alias, meta, labels, search := postgres.SessionRow(&sd.s)
		// The first seeded is the most recently updated.
		if _, err := conn.Exec(ctx, `INSERT INTO sessions (id, namespace, alias, created_ns, updated_ns, revision, message_count, meta, label_pairs, meta_search, models)
			VALUES ($1, 'ns', $2, $3::bigint, $3::bigint + $4::bigint, 1, 0, $5, $6, $7, $8)`,
			sd.id, alias, base, int64(len(seeds)-i)*1000, meta, labels, search, sd.models); err != nil {
			t.Fatalf("seed the version 9 schema: %v", err)
		}
	}
	s := open(t, dsn)
	list := func(opts storage.ListOptions) []string {
		t.Helper()
		opts.Namespace = "ns"
		var ids []string
		if err := s.List(ctx, opts, func(m *storage.Session) error { ids = append(ids, m.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	a, b, c := seeds[0].id, seeds[1].id, seeds[2].id
	for _, tc := range []struct {
		name string
		opts storage.ListOptions
		want []string
	}{
		{"all", storage.ListOptions{}, []string{a, b, c}},
		{"label team=a", storage.ListOptions{Labels: map[string]string{"team": "a"}}, []string{a}},
		{"label team=b", storage.ListOptions{Labels: map[string]string{"team": "b"}}, []string{c}},
		{"model m-1", storage.ListOptions{Model: "m-1"}, []string{a}},
		{"alias prefix", storage.ListOptions{AliasPrefix: "w"}, []string{a}},
	} {
		if got := list(tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("list %s after the upgrade: %v; want %v", tc.name, got, tc.want)
		}
	}
	if got, err := s.Get(ctx, storage.Ref{Namespace: "ns", Alias: "wx"}); err != nil || got.ID != a || got.Title != "Weather in Paris" {
		t.Fatalf("Get by alias after the upgrade: %+v, %v", got, err)
	}
	if n := hits(t, s, "paris"); n != 1 {
		t.Errorf("search of a title after the upgrade: %d hits, want 1", n)
	}
	if n := hits(t, s, "rome"); n != 1 {
		t.Errorf("search of a summary after the upgrade: %d hits, want 1", n)
	}

	// Writes after the upgrade: an append moves b to the top, an update
	// changes a's labels, a delete removes c's filters row with it.
	if _, err := s.Append(ctx, storage.AppendRequest{Ref: storage.Ref{Namespace: "ns", ID: b}, Messages: []*sessiondv1.Message{
		{Id: "b1", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-3", Content: "hello"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{Namespace: "ns", ID: a}, Fields: storage.UpdateLabels, Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, storage.Ref{Namespace: "ns", ID: c}, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts storage.ListOptions
		want []string
	}{
		{"all", storage.ListOptions{}, []string{a, b}},
		{"label team=a", storage.ListOptions{Labels: map[string]string{"team": "a"}}, nil},
		{"label team=b", storage.ListOptions{Labels: map[string]string{"team": "b"}}, []string{a}},
		{"model m-3", storage.ListOptions{Model: "m-3"}, []string{b}},
	} {
		if got := list(tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("list %s after the writes: %v; want %v", tc.name, got, tc.want)
		}
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM session_filters`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("%d session_filters rows after the delete (%v); want 2", rows, err)
	}
}

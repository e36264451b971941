package postgres_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// TestPlansIndexDriven: on 20,000 sessions in four namespaces, a quarter
// of them labelled, a fifth with a model, a third titled, each with an
// indexed message, every listing
// page (with each filter, and after a cursor) and every search page reads
// through indexes, planned as the driver plans them (generic plans), as
// does a watch poll of 500 sessions: no statement reads every session's
// row.
func TestPlansIndexDriven(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	ctx := t.Context()
	conn := connect(t, dsn)
	label := postgres.EncodeMeta(&storage.Session{})
	if _, err := conn.Exec(ctx, `WITH x AS (
			INSERT INTO sessions (id, namespace, alias, created_ns, updated_ns, revision, message_count, meta)
			SELECT gen_random_uuid(), 'ns' || (i % 4), CASE WHEN i % 10 = 0 THEN 'alias-' || i END,
				1700000000000000000 + i, 1700000000000000000 + i * 1000, 1, 0, $1
			FROM generate_series(1, 20000) AS i
			RETURNING id, created_ns - 1700000000000000000 AS i
		)
		INSERT INTO session_filters (id, label_pairs, models, meta_search)
		SELECT id, CASE WHEN i % 4 = 1 THEN ARRAY['\x047465616d61'::bytea] ELSE '{}' END,
			CASE WHEN i % 5 = 0 THEN ARRAY['m-1'] ELSE '{}' END,
			CASE WHEN i % 3 = 0 THEN 'title ' || i || E'\n\n' ELSE E'\n\n' END
		FROM x`, label); err != nil {
		t.Fatal(err)
	}
	// One indexed message each.
	if _, err := conn.Exec(ctx, `WITH m AS (
			INSERT INTO message_search (session_id, pos, sig) SELECT id, 0, repeat('01', 1024)::bit(2048) FROM sessions RETURNING session_id
		)
		UPDATE sessions SET message_count = 1, search_count = 1 WHERE id IN (SELECT session_id FROM m)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE sessions, session_filters, message_search"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	cursor := &storage.Cursor{UpdatedAt: time.Unix(0, 1700000000000000000+10000*1000), ID: "80000000-0000-0000-0000-000000000000"}
	type query struct {
		name string
		sql  string
		args []any
	}
	var qs []query
	for _, o := range []struct {
		name string
		opts storage.ListOptions
	}{
		{"list", storage.ListOptions{}},
		{"list by label", storage.ListOptions{Labels: map[string]string{"team": "a"}}},
		{"list by model", storage.ListOptions{Model: "m-1"}},
		{"list by alias prefix", storage.ListOptions{AliasPrefix: "alias-1"}},
		{"list by label and model", storage.ListOptions{Labels: map[string]string{"team": "a"}, Model: "m-1"}},
	} {
		o.opts.Namespace = "ns1"
		for _, after := range []*storage.Cursor{nil, cursor} {
			sql, args := postgres.ListQuery(o.opts, after, 5000)
			qs = append(qs, query{fmt.Sprintf("%s (cursor %v)", o.name, after != nil), sql, args})
		}
	}
	for _, q := range []string{"title 17", "ti"} {
		sql, args := postgres.SearchCandidates("ns1", q)
		qs = append(qs, query{fmt.Sprintf("search candidates for %q", q), sql, args})
	}
	var watched string
	if err := conn.QueryRow(ctx, `SELECT array_agg(id)::text FROM (SELECT id FROM sessions LIMIT 500) AS w`).Scan(&watched); err != nil {
		t.Fatal(err)
	}
	qs = append(qs, query{"watch poll", postgres.MovedSQL, []any{watched, "{" + strings.Repeat("1,", 499) + "1}"}})
	for i, q := range qs {
		// A prepared statement's plan, generic as the driver's are.
		name := fmt.Sprint("q", i)
		if _, err := conn.Prepare(ctx, name, q.sql); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		params := make([]string, len(q.args))
		for j, a := range q.args {
			params[j] = literal(t, a)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+strings.Join(params, ", ")+")")
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan on sessions") || strings.Contains(plan, "Seq Scan on session_filters") || strings.Contains(plan, "Seq Scan on message_search") {
			t.Errorf("%s reads every session:\n%s\n%s", q.name, q.sql, plan)
		}
	}
}

// literal is a query argument as an SQL literal of unknown type, which
// EXECUTE converts to its parameter's type.
func literal(t *testing.T, a any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := a.(type) {
	case string:
		return quote(v)
	case int, int32, int64:
		return fmt.Sprint(v)
	case pgtype.Bits:
		var b strings.Builder
		for i := range int(v.Len) {
			b.WriteByte('0' + v.Bytes[i/8]>>(7-i%8)&1)
		}
		return quote(b.String())
	case [][]byte:
		elems := make([]string, len(v))
		for i, b := range v {
			elems[i] = fmt.Sprintf(`"\\x%x"`, b)
		}
		return quote("{" + strings.Join(elems, ",") + "}")
	}
	t.Fatalf("no literal for %T", a)
	return ""
}

// TestIndexerReadDoesNotSortBodies: the search indexer's read, planned as
// the driver plans it, hands the messages over as the join finds them
// instead of sorting them, bodies and all, by position.
func TestIndexerReadDoesNotSortBodies(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	ctx := t.Context()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `WITH x AS (
			INSERT INTO sessions (id, namespace, created_ns, updated_ns, revision, message_count, meta)
			SELECT gen_random_uuid(), 'ns', i, i, 1, 100, '\x00'::bytea FROM generate_series(1, 200) AS i
			RETURNING id
		)
		INSERT INTO messages (session_id, pos, msg_id, body, revision, updated_ns)
		SELECT x.id, p, 'm' || p, '\x00'::bytea, 1, 1 FROM x, generate_series(0, 99) AS p`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE sessions, messages"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "unindexed", postgres.UnindexedSQL); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN (VERBOSE) EXECUTE unindexed(32, 256)")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if strings.Contains(l, "Sort Key:") && strings.Contains(l, "pos") {
			t.Errorf("the indexer's read sorts the messages:\n%s", strings.Join(lines, "\n"))
		}
	}
}

// TestBatchReadsSessionsOnce: each of a group commit's statements,
// planned as the driver plans them on a table as small as a benchmark's,
// reads sessions once for a batch of refs by id: every further read of a
// small, busy table is a sequential scan over the dead versions its
// appends leave behind.
func TestBatchReadsSessionsOnce(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	ctx := t.Context()
	conn := connect(t, dsn)
	var ids string
	if err := conn.QueryRow(ctx, `WITH x AS (
			INSERT INTO sessions (id, namespace, created_ns, updated_ns, revision, message_count, meta)
			SELECT gen_random_uuid(), 'ns', i, i, 1, 0, '\x00'::bytea FROM generate_series(1, 16) AS i
			RETURNING id
		)
		SELECT array_agg(id)::text FROM (SELECT id FROM x LIMIT 2) AS y`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	sig := strings.Repeat("0", 2048) // an empty search signature
	readsSessions := regexp.MustCompile(`Scan .*on sessions( |$)`)
	for _, q := range []struct{ name, sql, args string }{
		{"lock", postgres.LockBatchSQL, `'{ns,ns}', '` + ids + `', '{NULL,NULL}'`},
		{"append", postgres.AppendBatchSQL, `'{0,1}', '{ns,ns}', '` + ids + `', '{NULL,NULL}', '{0,0}', '{1,1}', '{1,1}', '{f,f}', '{1,2}', '{1,2}',
			'{a,b}', '{0,1}', '{1,1}', '{a,b}', '{"\\x00","\\x00"}', '{` + sig + `,` + sig + `}'`},
	} {
		if _, err := conn.Prepare(ctx, q.name, q.sql); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE "+q.name+"("+q.args+")")
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		reads := 0
		for _, l := range lines {
			if readsSessions.MatchString(l) && !strings.Contains(l, "never executed") {
				reads++
			}
		}
		if reads != 1 {
			t.Errorf("the batch's %s statement reads sessions %d times, want once:\n%s", q.name, reads, strings.Join(lines, "\n"))
		}
	}
}

// TestIDsCheckProbesMessageKey: the check that none of an append's ids
// is stored, in the one-statement append and in the group commit's,
// planned as the driver plans them on tables whose statistics still say
// they are empty (a new database, or a connection opened early), looks
// each id up in the message key, so that its cost does not grow with the
// session's messages.
func TestIDsCheckProbesMessageKey(t *testing.T) {
	dsn := pgtest.Schema(t)
	open(t, dsn)
	ctx := t.Context()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for name, sql := range map[string]string{"one": postgres.AppendFastByID, "batch": postgres.AppendBatchSQL} {
		if _, err := conn.Prepare(ctx, name, sql); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	rows, err := conn.Query(ctx, `WITH x AS (
			INSERT INTO sessions (id, namespace, created_ns, updated_ns, revision, message_count, meta)
			SELECT gen_random_uuid(), 'ns', i, i, 1, 500, '\x00'::bytea FROM generate_series(1, 2) AS i
			RETURNING id
		), m AS (
			INSERT INTO messages (session_id, pos, msg_id, body, revision, updated_ns)
			SELECT x.id, p, 'm' || p, '\x00'::bytea, 1, 1 FROM x, generate_series(0, 499) AS p
		)
		SELECT id::text FROM x`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	sig := strings.Repeat("0", 2048)
	for name, args := range map[string]string{
		"one": `'ns', '` + ids[0] + `', 0, 1, 1, '{a}', '{a}', '{"\\x00"}', false, '{` + sig + `}'`,
		"batch": `'{0,1}', '{ns,ns}', '{` + ids[0] + `,` + ids[1] + `}', '{NULL,NULL}', '{0,0}', '{1,1}', '{1,1}', '{f,f}', '{1,2}', '{1,2}',
			'{a,b}', '{0,1}', '{1,1}', '{a,b}', '{"\\x00","\\x00"}', '{` + sig + `,` + sig + `}'`,
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE "+name+"("+args+")")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		// Every read of messages m (the ids check's) finds its rows by
		// both columns of the key, and reads none of the session's other
		// messages.
		scan := regexp.MustCompile(`Scan .*on (?:\S+\.)?messages m `)
		probes := 0
		for i, l := range lines {
			if !scan.MatchString(l) {
				continue
			}
			probes++
			var cond string
			for _, next := range lines[i+1:] {
				if strings.Contains(next, "->") {
					break
				}
				if strings.Contains(next, "Index Cond:") {
					cond = next
				}
				if strings.Contains(next, "Rows Removed") {
					t.Errorf("%s: the ids check reads messages it does not need:\n%s", name, plan)
				}
			}
			if !strings.Contains(cond, "session_id") || !strings.Contains(cond, "msg_id") {
				t.Errorf("%s: the ids check does not look the ids up by the message key:\n%s", name, plan)
			}
		}
		if probes == 0 {
			t.Errorf("%s: no read of messages in the plan:\n%s", name, plan)
		}
	}
}

package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// appendBatchSQL writes a group commit's appends in one statement, each
// under appendFastSQL's rules, from arrays with one entry per append
// ($1-$10: its ordinal in the batch, namespace, id or alias (the other
// NULL), expected revision, its number of messages, now, whether it would
// title an untitled session, and the first and last index in $11 of the
// ids the client set), the ids the client set ($11), and one per message
// ($12-$16: the append's ordinal, the message's ordinal in its append, its
// id, encoding and search signature). Each message carries its append's revision and
// updated_ns, the append's event for watchers, and goes into a session
// whose messages are all indexed with its signature, as appendFastSQL's
// do. It returns one row per append it wrote, named by its ordinal; an
// append without a row is not plainly new (or names no session) and takes
// the general path.
//
// Each session may appear once: an UPDATE changes a row once per
// statement, so a second append to a session waits for the batch's next
// round (rounds); of two appends naming one session by id and by alias,
// which rounds cannot tell apart, one is written and the other takes the
// general path. The sessions are locked first, by lockBatchSQL, so
// that this statement's snapshot already holds every append committed
// before the lock was granted: its ids check is then exact.
//
// The ids check looks each of an append's ids (its slice of $11) up in the
// message key (session, id), one probe each (a scalar subquery, which
// PostgreSQL plans alone: equality on both columns of a unique key). A
// join or an = ANY of the ids against the session's messages is planned,
// once per connection and often on tables still nearly empty, as a read
// of all of the session's messages, a cost that grows with every append.
//
// A ref by id needs no lookup to find its row, and one by alias one index
// probe, so the statement reads sessions once, in the UPDATE's own join:
// each further join of the batch against sessions is another scan (on a
// small, busy table a sequential one, over every dead version of its
// rows) and another hash table, at every execution.
const appendBatchSQL = `WITH a AS (
	SELECT a.*, coalesce(a.ref_id, (SELECT x.id FROM sessions x WHERE x.namespace = a.ref_ns AND x.alias = a.ref_alias)) AS session_id
	FROM unnest($1::int[], $2::text[], $3::uuid[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::boolean[], $9::int[], $10::int[])
		AS a(ord, ref_ns, ref_id, ref_alias, expected, n, now_ns, titles, sent_lo, sent_hi)
), s AS (
	UPDATE sessions SET revision = revision + 1, message_count = message_count + a.n,
		updated_ns = CASE WHEN a.now_ns > updated_ns THEN a.now_ns ELSE updated_ns + 1000 END,
		search_count = CASE WHEN search_count = message_count THEN message_count + a.n ELSE search_count END
	FROM a
	WHERE sessions.id = a.session_id AND sessions.namespace = a.ref_ns AND (a.expected = 0 OR sessions.revision = a.expected)
		AND sessions.open_message_id IS NULL
		AND NOT (a.titles AND get_byte(sessions.meta, 1) = 0)
		AND NOT EXISTS (SELECT 1 FROM unnest(($11::text[])[a.sent_lo:a.sent_hi]) AS sent(mid)
			WHERE (SELECT true FROM messages m WHERE m.session_id = sessions.id AND m.msg_id = sent.mid))
	RETURNING a.ord, a.n, sessions.id, sessions.updated_ns, sessions.revision, sessions.message_count, sessions.search_count
), m AS (
	INSERT INTO messages (session_id, pos, msg_id, body, revision, updated_ns)
	SELECT s.id, s.message_count - s.n + t.i - 1, t.mid, t.body, s.revision, s.updated_ns
	FROM s JOIN unnest($12::int[], $13::bigint[], $14::text[], $15::bytea[]) AS t(ord, i, mid, body) ON t.ord = s.ord
), i AS (
	INSERT INTO message_search (session_id, pos, sig)
	SELECT s.id, s.message_count - s.n + t.i - 1, t.sig
	FROM s JOIN unnest($12::int[], $13::bigint[], $16::bit(2048)[]) AS t(ord, i, sig) ON t.ord = s.ord
	WHERE s.search_count = s.message_count
)
SELECT ord, id::text, revision, message_count FROM s`

// lockBatchSQL locks the sessions a batch names ($1 namespaces, $2 ids,
// $3 aliases, as appendBatchSQL's $2-$4) in the order of their ids, so
// that two replicas' batches on the same sessions wait for each other
// instead of deadlocking, whatever refs they name them by. It reads
// sessions once, as appendBatchSQL does: a ref by alias is looked up in
// the alias index, and a ref by id locks that id's row whatever its
// namespace (appendBatchSQL checks the namespace; a ref naming the wrong
// one has then only held a lock until the batch's commit).
const lockBatchSQL = `SELECT id FROM sessions WHERE id IN (
	SELECT coalesce(a.ref_id, (SELECT x.id FROM sessions x WHERE x.namespace = a.ref_ns AND x.alias = a.ref_alias))
	FROM unnest($1::text[], $2::uuid[], $3::text[]) AS a(ref_ns, ref_id, ref_alias))
	ORDER BY id FOR UPDATE`

// batchArgs are appendBatchSQL's arrays.
type batchArgs struct {
	ord                []int32
	ns                 []string
	ids                []*uuidArg
	aliases            []*string
	expected, n, nowNS []int64
	titles             []bool
	sentLo, sentHi     []int32
	sent               []string
	msgOrd             []int32
	msgIndex           []int64
	msgIDs             []string
	bodies             [][]byte
	sigs               []pgtype.Bits
}

// makeBatchArgs returns arrays with room for the appends of r: each
// array sized once, instead of grown append by append.
func makeBatchArgs(r []*fastAppend) *batchArgs {
	var sent, msgs int
	for _, a := range r {
		sent, msgs = sent+len(a.sent), msgs+len(a.msgIDs)
	}
	n := len(r)
	return &batchArgs{
		ord: make([]int32, 0, n), ns: make([]string, 0, n), ids: make([]*uuidArg, 0, n), aliases: make([]*string, 0, n),
		expected: make([]int64, 0, n), n: make([]int64, 0, n), nowNS: make([]int64, 0, n), titles: make([]bool, 0, n),
		sentLo: make([]int32, 0, n), sentHi: make([]int32, 0, n), sent: make([]string, 0, sent),
		msgOrd: make([]int32, 0, msgs), msgIndex: make([]int64, 0, msgs), msgIDs: make([]string, 0, msgs), bodies: make([][]byte, 0, msgs),
		sigs: make([]pgtype.Bits, 0, msgs),
	}
}

// add appends a, the batch's ord-th, to the arrays.
func (b *batchArgs) add(ord int32, a *fastAppend) {
	b.ord = append(b.ord, ord)
	b.addRef(a)
	b.expected = append(b.expected, a.expected)
	b.n = append(b.n, int64(len(a.msgIDs)))
	b.nowNS = append(b.nowNS, a.nowNS)
	b.titles = append(b.titles, a.titles)
	b.sentLo = append(b.sentLo, int32(len(b.sent)+1)) // PostgreSQL's arrays count from 1
	b.sent = append(b.sent, a.sent...)
	b.sentHi = append(b.sentHi, int32(len(b.sent)))
	for i, id := range a.msgIDs {
		b.msgOrd, b.msgIndex = append(b.msgOrd, ord), append(b.msgIndex, int64(i+1))
		b.msgIDs, b.bodies = append(b.msgIDs, id), append(b.bodies, a.bodies[i])
	}
	b.sigs = append(b.sigs, a.sigs...)
}

// addRef appends a's ref alone, as lockBatchSQL takes it.
func (b *batchArgs) addRef(a *fastAppend) {
	b.ns = append(b.ns, a.ns)
	if a.byID {
		id := uuidArg(a.ref)
		b.ids, b.aliases = append(b.ids, &id), append(b.aliases, nil)
	} else {
		b.ids, b.aliases = append(b.ids, nil), append(b.aliases, &a.ref)
	}
}

func (b *batchArgs) args() []any {
	return []any{b.ord, b.ns, b.ids, b.aliases, b.expected, b.n, b.nowNS, b.titles,
		b.sentLo, b.sentHi, b.sent, b.msgOrd, b.msgIndex, b.msgIDs, b.bodies, encodeSigs(b.sigs)}
}

// rounds splits batch into rounds in which each ref appears once, keeping
// arrival order: a second append to a session is written by the next
// round, whose statement sees the first's rows. Appends to distinct
// sessions, however many, make one round.
func rounds(batch []*fastAppend) [][]*fastAppend {
	var out [][]*fastAppend
	seen := map[string]int{} // ref key: rounds holding it
	for _, a := range batch {
		i := seen[a.key]
		seen[a.key] = i + 1
		if i == len(out) {
			out = append(out, nil)
		}
		out[i] = append(out[i], a)
	}
	return out
}

// queueBatch queues the statements that write batch on b: the lock, then
// one appendBatchSQL per round.
func queueBatch(b *pgx.Batch, batch []*fastAppend) [][]*fastAppend {
	lock := batchArgs{ns: make([]string, 0, len(batch)), ids: make([]*uuidArg, 0, len(batch)), aliases: make([]*string, 0, len(batch))}
	for _, a := range batch {
		lock.addRef(a)
	}
	b.Queue(lockBatchSQL, lock.ns, lock.ids, lock.aliases)
	rs := rounds(batch)
	for _, r := range rs {
		args := makeBatchArgs(r)
		for i, a := range r {
			args.add(int32(i), a)
		}
		b.Queue(appendBatchSQL, args.args()...)
	}
	return rs
}

// readBatch reads the results queueBatch's statements answered.
func readBatch(br pgx.BatchResults, rs [][]*fastAppend) error {
	if _, err := br.Exec(); err != nil { // the lock
		return err
	}
	for _, r := range rs {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			ord  int32
			done appended
			rev  int64
		)
		_, err = pgx.ForEachRow(rows, []any{&ord, &done.id, &rev, &done.res.MessageCount}, func() error {
			if ord < 0 || int(ord) >= len(r) {
				return errors.New("postgres: the batch statement answered an append it was not given")
			}
			m := done
			m.res.Revision = uint64(rev)
			r[ord].done = &m
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

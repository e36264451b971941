package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// sessionCols are the sessions columns scanSession reads, in its order.
const sessionCols = `id::text, namespace, coalesce(alias, ''), created_ns, updated_ns, revision, message_count, meta, tally, expire_after_ns,
	coalesce(open_message_id, '')`

// The unique constraints whose violation means something to a client.
const (
	aliasKey   = "sessions_namespace_alias_key"
	sessionKey = "sessions_pkey"
)

func scanSession(row pgx.Row) (*storage.Session, error) {
	var m storage.Session
	if err := newSessionScan[[]byte]().scan(row, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// sessionScan reads sessionCols rows, one after another, into the
// destinations it holds, reused from row to row. The metadata and tally
// are read as B: pgtype.DriverBytes, which saves their copies, when the
// rows are those of a Rows still open (their bytes are the connection's
// until the next row); []byte otherwise. Rows of one namespace share its
// string.
type sessionScan[B []byte | pgtype.DriverBytes] struct {
	id, alias, open              string
	created, updated, rev, count int64
	expire                       int64
	namespace, meta, tally       B
	lastNamespace                string
	dest                         []any
}

func newSessionScan[B []byte | pgtype.DriverBytes]() *sessionScan[B] {
	c := new(sessionScan[B])
	c.dest = []any{&c.id, &c.namespace, &c.alias, &c.created, &c.updated, &c.rev, &c.count, &c.meta, &c.tally, &c.expire, &c.open}
	return c
}

// scan reads row into m, a session of zero value.
func (c *sessionScan[B]) scan(row pgx.Row, m *storage.Session) error {
	if err := row.Scan(c.dest...); err != nil {
		return err
	}
	if string(c.namespace) != c.lastNamespace {
		c.lastNamespace = string(c.namespace)
	}
	m.ID, m.Namespace, m.Alias, m.MessageCount = c.id, c.lastNamespace, c.alias, c.count
	if err := decodeMeta([]byte(c.meta), m); err != nil {
		return fmt.Errorf("postgres: session %s metadata does not decode: %v: %w", m.ID, err, storage.ErrDataLoss)
	}
	if err := decodeTally([]byte(c.tally), m); err != nil {
		return fmt.Errorf("postgres: session %s tally does not decode: %v: %w", m.ID, err, storage.ErrDataLoss)
	}
	m.OpenMessageID = c.open
	m.ExpireAfter = time.Duration(c.expire)
	m.CreatedAt, m.UpdatedAt = time.Unix(0, c.created).UTC(), time.Unix(0, c.updated).UTC()
	m.Revision = uint64(c.rev)
	return nil
}

// appended is what an appendFastSQL row says: the session's id (whose
// watchers to wake) and the append's answer.
type appended struct {
	id  string
	res storage.AppendResult
}

// scanAppended reads an appendFastSQL row. Not a whole session (scanSession):
// decoding the metadata and tally that an append does not answer would cost
// every append.
func scanAppended(row pgx.Row) (*appended, error) {
	var (
		a   appended
		rev int64
	)
	if err := row.Scan(&a.id, &rev, &a.res.MessageCount); err != nil {
		return nil, err
	}
	a.res.Revision = uint64(rev)
	return &a, nil
}

// refWhere returns the WHERE clause and arguments selecting ref's session.
func refWhere(ref storage.Ref) (string, []any) {
	if ref.ID != "" {
		return "namespace = $1 AND id = $2::uuid", []any{ref.Namespace, ref.ID}
	}
	return "namespace = $1 AND alias = $2", []any{ref.Namespace, ref.Alias}
}

func notFound(ref storage.Ref) error {
	if ref.ID != "" {
		return fmt.Errorf("postgres: session %s in namespace %q: %w", ref.ID, ref.Namespace, storage.ErrNotFound)
	}
	return fmt.Errorf("postgres: session with alias %q in namespace %q: %w", ref.Alias, ref.Namespace, storage.ErrNotFound)
}

// getSession reads ref's session in q; lock is "" or "FOR UPDATE".
func getSession(ctx context.Context, q pgx.Tx, ref storage.Ref, lock string) (*storage.Session, error) {
	where, args := refWhere(ref)
	m, err := scanSession(q.QueryRow(ctx, "SELECT "+sessionCols+" FROM sessions WHERE "+where+" "+lock, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(ref)
	}
	return m, err
}

// wtx is a write transaction: it collects the sessions whose events it
// wrote, to wake their watchers once it has committed.
type wtx struct {
	pgx.Tx
	changed []changed
}

// changed names a session a write changed and its revision after it.
type changed struct {
	id  string
	rev uint64
}

// withTx runs fn in a read-committed transaction and commits it, then
// wakes the watchers of what it changed. A write that fails changes
// nothing: the transaction rolls back.
func (s *Store) withTx(ctx context.Context, fn func(tx *wtx) error) error {
	var w *wtx
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w = &wtx{Tx: tx}
		return fn(w)
	})
	if err == nil {
		for _, c := range w.changed {
			s.wake(c.id, c.rev)
		}
	}
	return wrapErr(err)
}

// onConn runs fn, a write that sends its own BEGIN and COMMIT in batches
// (fewer round trips than withTx), on a pooled connection: a failed write
// is rolled back, and a successful one wakes the watchers of the sessions
// whose events it queued.
func (s *Store) onConn(ctx context.Context, fn func(conn *pgxpool.Conn, w *wtx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release() // a connection left inside a transaction is closed, not reused
	w := &wtx{}
	if err := fn(conn, w); err != nil {
		if _, rerr := conn.Exec(context.Background(), "ROLLBACK"); rerr != nil {
			_ = conn.Conn().Close(context.Background())
		}
		return err
	}
	for _, c := range w.changed {
		s.wake(c.id, c.rev)
	}
	return nil
}

// withSnapshot runs fn in a read-only repeatable-read transaction: one
// consistent snapshot.
func (s *Store) withSnapshot(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return wrapErr(pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn))
}

// wrapErr maps pgx errors, leaving errors that already wrap a storage
// sentinel (returned by the rule functions) as they are.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, e := range []error{storage.ErrNotFound, storage.ErrConflict, storage.ErrAliasInUse, storage.ErrAlreadyExists,
		storage.ErrMessageConflict, storage.ErrMessageState, storage.ErrTooLarge, storage.ErrInvalid, storage.ErrDataLoss, storage.ErrNoSpace, storage.ErrUnavailable, storage.ErrClosed} {
		if errors.Is(err, e) {
			return err
		}
	}
	return mapErr(err)
}

// now returns the current time in Unix nanoseconds, strictly after prev so
// that every change moves updated_at forward.
func now(prev time.Time) time.Time {
	t := time.Now().UTC()
	if !t.After(prev) {
		t = prev.Add(time.Microsecond)
	}
	return t
}

// searchText is what search matches against: lowered, NUL replaced (text
// columns cannot hold it). The index only narrows candidates; hits are
// checked on the real strings.
func searchText(parts ...string) string {
	return strings.ReplaceAll(strings.ToLower(strings.Join(parts, "\n")), "\x00", "\uFFFD")
}

// labelPairs encodes labels for the containment filter: each pair is the
// key's length, the key and the value.
func labelPairs(labels map[string]string) [][]byte {
	out := make([][]byte, 0, len(labels))
	for k, v := range labels {
		b := binary.AppendUvarint(nil, uint64(len(k)))
		out = append(out, append(append(b, k...), v...))
	}
	return out
}

// sessionRow is the columns of m that insertSession and updateSession
// write beside its id: alias (NULL for none), meta, label pairs, search text.
func sessionRow(m *storage.Session) (alias any, meta []byte, labels [][]byte, search string) {
	return aliasCol(m), encodeMeta(m), labelPairs(m.Labels), searchText(m.GivenTitle(), m.Alias, m.Summary)
}

// openCol is m's open_message_id column: NULL for none.
func openCol(m *storage.Session) any {
	if m.OpenMessageID == "" {
		return nil
	}
	return m.OpenMessageID
}

// aliasCol is m's alias column: NULL for none.
func aliasCol(m *storage.Session) any {
	if m.Alias == "" {
		return nil
	}
	return m.Alias
}

// encodeTally is the tally column of m: a sessiond.v1.Session proto holding
// only open_tool_call_ids, usage, models and title_derived (what the
// messages decided), or NULL (nil) for a session whose tally is unknown
// (written before schema version 3).
func encodeTally(m *storage.Session) ([]byte, error) {
	if m.Unknown {
		return nil, nil
	}
	u := m.Usage
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&sessiondv1.Session{
		OpenToolCallIds: m.OpenToolCallIDs, Models: m.Models, TitleDerived: m.TitleDerived,
		Usage: &sessiondv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningTokens},
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: encode the tally of session %s: %w", m.ID, err)
	}
	return b, nil
}

// models is the models column of m.
func models(m *storage.Session) []string {
	if m.Models == nil {
		return []string{}
	}
	return m.Models
}

// aliasErr turns a violation of the alias key into ErrAliasInUse.
func aliasErr(err error, m *storage.Session) error {
	if uniqueViolation(err, aliasKey) {
		return fmt.Errorf("alias %q is in use in namespace %q: %w", m.Alias, m.Namespace, storage.ErrAliasInUse)
	}
	return err
}

// insertSession inserts m (its ID set) with no messages yet.
func insertSession(ctx context.Context, tx pgx.Tx, m *storage.Session) error {
	alias, meta, labels, search := sessionRow(m)
	tally, err := encodeTally(m)
	if err != nil {
		return err
	}
	// The filters row is inserted from the sessions row, so that a taken
	// id or alias is refused by sessions' keys, whose names Create and
	// aliasErr know.
	_, err = tx.Exec(ctx, `WITH x AS (
			INSERT INTO sessions (id, namespace, alias, created_ns, updated_ns, revision, message_count, meta, tally, expire_after_ns, open_message_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $11, $13, $14) RETURNING id
		)
		INSERT INTO session_filters (id, label_pairs, meta_search, models) SELECT id, $9, $10, $12 FROM x`,
		m.ID, m.Namespace, alias, m.CreatedAt.UnixNano(), m.UpdatedAt.UnixNano(), int64(m.Revision), m.MessageCount,
		meta, labels, search, tally, models(m), int64(m.ExpireAfter), openCol(m))
	return aliasErr(err, m)
}

// bumpSession writes a session's new time, revision, message count and
// tally (arguments: id, updated_ns, revision, message_count, tally, models,
// open_message_id) when only its messages changed, as in Append and Rewind;
// bumpArgs makes the arguments. Its filters row is written only when its
// models changed.
const bumpSession = bumpModels + bumpSet + ` WHERE id = $1`

// bumpSet is bumpSession's UPDATE up to its WHERE.
const bumpSet = `UPDATE sessions SET updated_ns = $2, revision = $3, message_count = $4, tally = $5, open_message_id = $7`

// bumpModels is the bump statements' write of the session's models ($6)
// into its filters row, when they changed.
const bumpModels = `WITH f AS (
	UPDATE session_filters SET models = $6 WHERE id = $1 AND models <> $6
)
`

// bumpTitledSession is bumpSession for an append that also derived the
// session's title (storage.DeriveTitle), which meta holds; meta_search
// holds only a title a client gave.
const bumpTitledSession = bumpModels + `UPDATE sessions SET updated_ns = $2, revision = $3, message_count = $4, tally = $5, open_message_id = $7, meta = $8 WHERE id = $1`

func bumpArgs(m *storage.Session) ([]any, error) {
	tally, err := encodeTally(m)
	if err != nil {
		return nil, err
	}
	return []any{m.ID, m.UpdatedAt.UnixNano(), int64(m.Revision), m.MessageCount, tally, models(m), openCol(m)}, nil
}

// updateSession writes m's metadata, revision and count; its filters row
// only when its labels, searched text or models changed.
func updateSession(ctx context.Context, tx pgx.Tx, m *storage.Session) error {
	alias, meta, labels, search := sessionRow(m)
	tally, err := encodeTally(m)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `WITH f AS (
			UPDATE session_filters SET label_pairs = $7, meta_search = $8, models = $10
			WHERE id = $1 AND (label_pairs <> $7 OR meta_search <> $8 OR models <> $10)
		)
		UPDATE sessions SET alias = $2, updated_ns = $3, revision = $4, message_count = $5, meta = $6,
			tally = $9, expire_after_ns = $11, open_message_id = $12
		WHERE id = $1`, m.ID, alias, m.UpdatedAt.UnixNano(), int64(m.Revision), m.MessageCount, meta, labels, search,
		tally, models(m), int64(m.ExpireAfter), openCol(m))
	return aliasErr(err, m)
}

// messageRows returns the columns of msgs' rows: ids and protobuf
// encodings (enc, the portable Store's, when given; made here otherwise).
// Their search text is the indexer's to write.
func messageRows(msgs []*sessiondv1.Message, enc [][]byte) (ids []string, bodies [][]byte, err error) {
	ids = make([]string, len(msgs))
	bodies = enc
	if bodies == nil {
		bodies = make([][]byte, len(msgs))
	}
	for i, m := range msgs {
		if enc == nil {
			if bodies[i], err = proto.Marshal(m); err != nil {
				return nil, nil, fmt.Errorf("postgres: encode message %d: %w", i, err)
			}
		}
		ids[i] = m.GetId()
	}
	return ids, bodies, nil
}

// queueMessages queues the insert of msgs at positions from, from+1, ...
// of session id.
func queueMessages(b *pgx.Batch, id string, from int64, msgs []*sessiondv1.Message, enc [][]byte) error {
	if len(msgs) == 0 {
		return nil
	}
	ids, bodies, err := messageRows(msgs, enc)
	if err != nil {
		return err
	}
	b.Queue(`INSERT INTO messages (session_id, pos, msg_id, body)
		SELECT $1, $2 + t.ord - 1, t.mid, t.body
		FROM unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(mid, body, ord)`,
		id, from, ids, bodies)
	return nil
}

// queueEvent queues what records the change m (after it) for watchers on
// every replica: its event and the trim of the session's history, in the
// write's transaction, so the event exists exactly when the change does.
// An append's event names its messages by position: the count messages
// before m.MessageCount. withTx sends the wake-up after the commit.
func queueEvent(b *pgx.Batch, tx *wtx, typ storage.EventType, m *storage.Session, count int) error {
	return queueEventRow(b, tx, typ, m, count, nil, nil)
}

// queueEventRow is queueEvent for any event: delta is a delta event's
// delta as applied (encoded), messages a finish event's closed message.
//
// The trim keeps the newest row at or before the start of the history
// (the last historyEvents revisions, or liveKept while the session has an
// open message or a finish's grace, except at a save or rewind): the
// appends after it that wrote no row take their session from it
// (readEvents).
func queueEventRow(b *pgx.Batch, tx *wtx, typ storage.EventType, m *storage.Session, count int, delta []byte, messages [][]byte) error {
	repeated, err := queueInsertEvent(b, typ, m, count, delta, messages)
	if err != nil {
		return err
	}
	short, long := int64(historyEvents), liveKept(repeated)
	switch {
	case typ == storage.EventReplaced:
		b.Queue(trimEvents, m.ID, int64(m.Revision)-short)
	case m.OpenMessageID != "":
		b.Queue(trimEvents, m.ID, int64(m.Revision)-long)
	default:
		b.Queue(trimEventsGrace, m.ID, int64(m.Revision)-short, int64(m.Revision)-long)
	}
	tx.changed = append(tx.changed, changed{m.ID, m.Revision})
	return nil
}

// trimEvents deletes session $1's events rows before the newest one at or
// before revision $2.
const trimEvents = `DELETE FROM events WHERE session_id = $1
	AND revision < (SELECT max(revision) FROM events WHERE session_id = $1 AND revision <= $2)`

// trimEventsGrace is trimEvents at revision $3 instead while the session
// is marked for the trimmer (a finish's grace).
const trimEventsGrace = `DELETE FROM events WHERE session_id = $1
	AND revision < (SELECT max(revision) FROM events WHERE session_id = $1 AND revision <= CASE
		WHEN EXISTS (SELECT FROM sessions WHERE id = $1 AND events_trim_ns IS NOT NULL) THEN $3::bigint ELSE $2::bigint END)`

// queueInsertEvent queues the insert of m's events row. It returns the
// bytes of the session's columns the row repeats (every row of the
// session holds them), besides the row's own change.
func queueInsertEvent(b *pgx.Batch, typ storage.EventType, m *storage.Session, count int, delta []byte, messages [][]byte) (int, error) {
	tally, err := encodeTally(m)
	if err != nil {
		return 0, err
	}
	// Not sessionRow: an event needs no label pairs or search text.
	meta := encodeMeta(m)
	b.Queue(`INSERT INTO events (session_id, revision, type, first_pos, count, namespace, alias, created_ns, updated_ns, message_count, meta,
			tally, expire_after_ns, open_message_id, delta, messages)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		m.ID, int64(m.Revision), int16(typ), m.MessageCount-int64(count), count,
		m.Namespace, aliasCol(m), m.CreatedAt.UnixNano(), m.UpdatedAt.UnixNano(), m.MessageCount, meta, tally, int64(m.ExpireAfter),
		openCol(m), delta, messages)
	return len(m.Namespace) + len(m.Alias) + len(meta) + len(tally) + len(m.OpenMessageID), nil
}

// addEvent sends queueEvent's statements (for an event that is not an
// append) in one round trip.
func addEvent(ctx context.Context, tx *wtx, typ storage.EventType, m *storage.Session) error {
	b := &pgx.Batch{}
	if err := queueEvent(b, tx, typ, m, 0); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// insertMessages stores msgs (encoded as enc, or nil) at positions from,
// from+1, ... of session id.
func insertMessages(ctx context.Context, tx pgx.Tx, id string, from int64, msgs []*sessiondv1.Message, enc [][]byte) error {
	b := &pgx.Batch{}
	if err := queueMessages(b, id, from, msgs, enc); err != nil || b.Len() == 0 {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// dropSearch forgets the indexed text of session id's messages from
// position keep on, which a rewind or save is replacing: the indexer
// indexes what takes their place, and a pass that read the messages
// before the change writes nothing (search_epoch).
func dropSearch(ctx context.Context, tx pgx.Tx, id string, keep int64) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM message_search WHERE session_id = $1 AND pos >= $2`, id, keep)
	b.Queue(`UPDATE sessions SET search_count = least(search_count, $2), search_epoch = nextval('sessions_search_epoch') WHERE id = $1`, id, keep)
	return tx.SendBatch(ctx, b).Close()
}

// eventBodies is the SQL of an events row e's appended messages: its
// messages column once a rewrite copied them there, else the messages at
// its positions. Read in one statement with the events rows, it sees one
// snapshot, in which a rewrite that moved the messages has also copied them.
const eventBodies = `coalesce(e.messages, ARRAY(SELECT m.body FROM messages m
	WHERE m.session_id = e.session_id AND m.pos >= e.first_pos AND m.pos < e.first_pos + e.count ORDER BY m.pos))`

// keepEventMessages keeps the appends in session id's history (up to its
// current revision rev) that a save or rewind keeping only its first keep
// messages is about to delete or overwrite, so that history replay still
// delivers what each append added: an append event row gets its messages
// copied into it, an append that wrote no row gets one, with its messages.
// An older append that wrote no row and loses some of its messages loses
// its revision on those it keeps: a watcher that still needs it finds the
// gap and is reset, rather than given part of it. The session's row lock
// is held.
func keepEventMessages(ctx context.Context, tx pgx.Tx, id string, keep int64, rev uint64) error {
	from := uint64(0)
	if rev > historyEvents {
		from = rev - historyEvents
	}
	evs, err := readEvents(ctx, tx, id, from, -1, rev)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, ev := range evs {
		if ev.derived && ev.first+int64(len(ev.bodies)) > keep {
			if _, err := queueInsertEvent(b, storage.EventAppended, ev.Session, len(ev.bodies), nil, ev.bodies); err != nil {
				return err
			}
		}
	}
	b.Queue(`UPDATE events e SET messages = `+eventBodies+`
		WHERE e.session_id = $1 AND e.type = $2 AND e.messages IS NULL AND e.first_pos + e.count > $3`,
		id, int16(storage.EventAppended), keep)
	b.Queue(`UPDATE messages SET revision = NULL, updated_ns = NULL WHERE session_id = $1 AND pos < $2
		AND revision = (SELECT revision FROM messages WHERE session_id = $1 AND pos = $2)`, id, keep)
	return tx.SendBatch(ctx, b).Close()
}

// storedAt returns a StoredAtFunc over session id's messages, read at the
// first call.
func storedAt(ctx context.Context, tx pgx.Tx, id string) storage.StoredAtFunc {
	var msgs []*sessiondv1.Message
	loaded := false
	return func(i int) (*sessiondv1.Message, error) {
		if !loaded {
			var err error
			if msgs, err = readMessages(ctx, tx, id, 0, -1); err != nil {
				return nil, err
			}
			loaded = true
		}
		if i >= len(msgs) {
			return nil, fmt.Errorf("postgres: session %s has no message %d: %w", id, i, storage.ErrDataLoss)
		}
		return msgs[i], nil
	}
}

// readMessages decodes session id's messages from position from, at most
// limit of them (-1: all).
func readMessages(ctx context.Context, tx querier, id string, from, limit int64) ([]*sessiondv1.Message, error) {
	rows, err := tx.Query(ctx, `SELECT body FROM messages WHERE session_id = $1 AND pos >= $2 ORDER BY pos LIMIT $3`,
		id, from, pgLimit(limit))
	if err != nil {
		return nil, err
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	return decodeAll(id, bodies)
}

// decodeAll decodes bodies, messages of session id, in order.
func decodeAll(id string, bodies [][]byte) ([]*sessiondv1.Message, error) {
	out := make([]*sessiondv1.Message, len(bodies))
	for i, b := range bodies {
		var err error
		if out[i], err = decode(id, b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decode(id string, b []byte) (*sessiondv1.Message, error) {
	m := &sessiondv1.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("postgres: a message of session %s does not decode: %v: %w", id, err, storage.ErrDataLoss)
	}
	return m, nil
}

// pgLimit turns "-1 or 0 = all" into SQL's LIMIT NULL.
func pgLimit(n int64) any {
	if n <= 0 {
		return nil
	}
	return n
}

func clone(m *storage.Session) *storage.Session {
	c := *m
	c.Metadata, c.Labels = maps.Clone(m.Metadata), maps.Clone(m.Labels)
	c.Tally = m.Tally.Clone()
	if m.Parent != nil {
		p := *m.Parent
		c.Parent = &p
	}
	return &c
}

// Create makes a session; see storage.Driver.
func (s *Store) Create(ctx context.Context, req storage.CreateRequest, msgs storage.Messages) (*storage.Session, error) {
	t := now(time.Time{})
	m := &storage.Session{
		ID: req.ID, Namespace: req.Namespace, Alias: req.Alias, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
		CreatedAt: t, UpdatedAt: t, Revision: max(req.Revision, 1), MessageCount: int64(len(msgs.Prepared)),
		Metadata: maps.Clone(req.Metadata), Labels: maps.Clone(req.Labels), Tally: msgs.Tally, ExpireAfter: req.ExpireAfter,
	}
	if !req.CreatedAt.IsZero() {
		m.CreatedAt = req.CreatedAt.UTC()
		if m.CreatedAt.After(t) {
			m.UpdatedAt = m.CreatedAt
		}
	}
	if req.Parent != nil {
		p := *req.Parent
		m.Parent = &p
	}
	fixed := m.ID != ""
	if !fixed {
		m.ID = uuid.Must(uuid.NewV7()).String()
	}
	var out *storage.Session
	// A create with a client-set id that races another create of that id
	// loses on the primary key; the second pass then sees the winner.
	for attempt := 0; ; attempt++ {
		err := s.withTx(ctx, func(tx *wtx) error {
			if fixed {
				cur, err := scanSession(tx.QueryRow(ctx, "SELECT "+sessionCols+" FROM sessions WHERE id = $1::uuid FOR UPDATE", m.ID))
				if err == nil {
					same, err := storage.SameCreate(cur, req, msgs, storedAt(ctx, tx, cur.ID))
					if err != nil {
						return err
					}
					if !same {
						return fmt.Errorf("session %s already exists: %w", m.ID, storage.ErrAlreadyExists)
					}
					out = cur
					return nil
				}
				if !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
			}
			var err error
			out, err = s.createNew(ctx, tx, m, msgs.Prepared, fixed)
			return err
		})
		if fixed && attempt == 0 && uniqueViolation(err, sessionKey) {
			continue
		}
		if uniqueViolation(err, sessionKey) {
			return nil, fmt.Errorf("session %s already exists: %w", m.ID, storage.ErrAlreadyExists)
		}
		return out, err
	}
}

// createNew inserts the new session m with msgs as its messages. An id
// the client chose (fixed) may be that of a deleted session, which left its
// last event (and, if a daemon of schema version 1 deleted it, its
// messages): those go first.
func (s *Store) createNew(ctx context.Context, tx *wtx, m *storage.Session, msgs []*sessiondv1.Message, fixed bool) (*storage.Session, error) {
	if fixed {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM events WHERE session_id = $1`, m.ID)
		b.Queue(`DELETE FROM messages WHERE session_id = $1`, m.ID)
		b.Queue(`DELETE FROM message_search WHERE session_id = $1`, m.ID)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	return s.insertNew(ctx, tx, m, func() error { return insertMessages(ctx, tx, m.ID, 0, msgs, nil) })
}

// insertNew inserts the new session m, its messages (fill) and its first
// event, returning a copy of m.
func (s *Store) insertNew(ctx context.Context, tx *wtx, m *storage.Session, fill func() error) (*storage.Session, error) {
	if err := insertSession(ctx, tx, m); err != nil {
		return nil, err
	}
	if err := fill(); err != nil {
		return nil, err
	}
	// The first event (revision 1) opens the session's history, so a
	// watcher from revision 1 replays everything after it.
	if err := addEvent(ctx, tx, storage.EventUpdated, m); err != nil {
		return nil, err
	}
	return clone(m), nil
}

// Get returns a session's metadata.
func (s *Store) Get(ctx context.Context, ref storage.Ref) (*storage.Session, error) {
	var out *storage.Session
	err := s.withSnapshot(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = getSession(ctx, tx, ref, "")
		return err
	})
	return out, err
}

// Load returns metadata and messages as one snapshot.
func (s *Store) Load(ctx context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	var (
		out  *storage.Session
		msgs []*sessiondv1.Message
	)
	err := s.withSnapshot(ctx, func(tx pgx.Tx) error {
		var err error
		if out, err = getSession(ctx, tx, ref, ""); err != nil {
			return err
		}
		if opts.View == storage.ViewContext && out.Compaction != nil {
			msgs, err = loadContext(ctx, tx, out, opts)
			return err
		}
		from, limit := opts.Offset, opts.Limit
		if opts.Tail && limit > 0 {
			from = max(0, out.MessageCount-limit)
		}
		if from >= out.MessageCount {
			msgs = []*sessiondv1.Message{}
			return nil
		}
		if limit == 0 {
			limit = -1
		}
		msgs, err = readMessages(ctx, tx, out.ID, from, limit)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return out, msgs, nil
}

// Save replaces messages, title, summary and metadata.
func (s *Store) Save(ctx context.Context, req storage.SaveRequest, msgs storage.Messages) (*storage.Session, error) {
	for attempt := 0; ; attempt++ {
		var out *storage.Session
		err := s.withTx(ctx, func(tx *wtx) error {
			cur, err := getSession(ctx, tx, req.Ref, "FOR UPDATE")
			if errors.Is(err, storage.ErrNotFound) && req.CreateIfMissing {
				if req.ExpectedRevision != 0 {
					return fmt.Errorf("save with expected revision %d creates nothing: %w", req.ExpectedRevision, storage.ErrConflict)
				}
				t := now(time.Time{})
				m := &storage.Session{
					ID: req.Ref.ID, Namespace: req.Ref.Namespace, Alias: req.Ref.Alias, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
					CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: int64(len(msgs.Prepared)), Metadata: maps.Clone(req.Metadata),
					Tally: msgs.Tally,
				}
				fixed := m.ID != ""
				if !fixed {
					m.ID = uuid.Must(uuid.NewV7()).String()
				}
				out, err = s.createNew(ctx, tx, m, msgs.Prepared, fixed)
				return err
			}
			if err != nil {
				return err
			}
			if same, err := storage.SameSave(cur, req, msgs, storedAt(ctx, tx, cur.ID)); err != nil {
				return err
			} else if same {
				out = cur
				return nil
			}
			if err := storage.CheckRevision(cur.ID, req.ExpectedRevision, cur.Revision); err != nil {
				return err
			}
			m := clone(cur)
			m.Title, m.TitleDerived, m.Summary, m.Metadata, m.Tally = req.Title, req.TitleDerived, req.Summary, maps.Clone(req.Metadata), msgs.Tally
			m.MessageCount, m.Revision, m.UpdatedAt = int64(len(msgs.Prepared)), m.Revision+1, now(cur.UpdatedAt)
			if err := keepEventMessages(ctx, tx, m.ID, 0, cur.Revision); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE session_id = $1`, m.ID); err != nil {
				return err
			}
			if err := dropSearch(ctx, tx, m.ID, 0); err != nil {
				return err
			}
			// The compactions' ranges went with the messages.
			if _, err := tx.Exec(ctx, `DELETE FROM compactions WHERE session_id = $1`, m.ID); err != nil {
				return err
			}
			m.Compaction = nil
			if err := insertMessages(ctx, tx, m.ID, 0, msgs.Prepared, msgs.Encoded); err != nil {
				return err
			}
			if err := updateSession(ctx, tx, m); err != nil {
				return err
			}
			out = clone(m)
			return addEvent(ctx, tx, storage.EventReplaced, m)
		})
		// A create that raced another create of the same session: save
		// into the winner.
		if attempt < 3 && req.CreateIfMissing && ((attempt == 0 && uniqueViolation(err, sessionKey)) ||
			(req.Ref.Alias != "" && errors.Is(err, storage.ErrAliasInUse))) {
			continue
		}
		if uniqueViolation(err, sessionKey) {
			// The id is taken in another namespace.
			return nil, fmt.Errorf("session %s already exists: %w", req.Ref.ID, storage.ErrAlreadyExists)
		}
		return out, err
	}
}

// Append adds messages; the idempotency rule is storage.CheckAppend's.
//
// Appends are the hot path. The common one (none of the batch's ids is
// stored, expected_revision absent or current) is one statement, one round
// trip and its own transaction: appendFast. Every other append (a retry
// holding stored messages, and one that raced a concurrent append of the
// same ids) takes two round trips: BEGIN, the session's row lock and the
// stored messages with the batch's ids in one; then, once CheckAppend has
// picked the new messages, those messages, the session's new revision, its
// event and COMMIT in the other.
func (s *Store) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	// The one-statement append leaves the tally as it is: only for a
	// batch that does not change it (no tool call or result, usage or
	// model, no open message), which needs no pairing check either.
	if !storage.AffectsTally(msgs.Prepared) && !opens(msgs.Prepared) {
		res, ok, err := s.appendFast(ctx, req, msgs)
		if err != nil {
			return storage.AppendResult{}, wrapErr(err)
		}
		if ok {
			return res, nil
		}
	}
	var res storage.AppendResult
	err := s.onConn(ctx, func(conn *pgxpool.Conn, w *wtx) error {
		var err error
		res, err = s.appendOn(ctx, conn, req, msgs, w)
		return err
	})
	if err != nil {
		return storage.AppendResult{}, wrapErr(err)
	}
	return res, nil
}

// opens reports whether msgs end with an open message (live turns).
func opens(msgs []*sessiondv1.Message) bool {
	return len(msgs) > 0 && msgs[len(msgs)-1].GetState() == sessiondv1.MessageState_MESSAGE_STATE_STREAMING
}

// appendFastSQL appends in one statement when the append is plainly new:
// it updates the session's row (which locks it) only if expected_revision
// is absent or current, no message of the session is open and none of the
// batch's ids is stored, and then inserts the messages at the positions
// after the row's count, each with the new revision and updated_ns: the
// append's event for watchers (no events row; see watch.go). Arguments: $1
// namespace, $2 id or alias, $3 expected revision (0: any), $4 the batch's
// size, $5 now (Unix ns), $6 the ids the client set, $7-$8 the messages'
// ids and encodings, $9 whether the batch would title an untitled session
// (storage.CanTitle; the general path then derives the title, since the
// row's meta says the title is empty when its second byte, the title's
// length, is 0), $10 the messages' search signatures. It returns the
// session's id, new revision and message count, all an append answers
// (scanAppended); no row: the append is not plainly new (or the session
// does not exist).
//
// A session whose messages are all indexed for search (search_count is
// its message count: the usual case once the indexer has caught up) gets
// its new messages' signatures in message_search in the same statement,
// and stays so: the search indexer then has nothing to read, decode or
// write for it. Any other session's messages wait for the indexer, which
// indexes a session's messages in order.
//
// The ids check probes the message key once per id, as appendBatchSQL's
// does (see there why).
//
// The updated_ns rule is now's: the time given, or 1µs after the stored
// one when that is not earlier. A concurrent append committed while this
// one waited for the row lock is seen by the UPDATE (read committed
// rechecks the row), but not by the ids check, which ran on the
// statement's snapshot; inserting such an id then violates the message
// key, and Append falls back to the two-round-trip path, which classifies
// the batch under the lock.
const appendFastSQL = `WITH s AS (
	UPDATE sessions SET revision = revision + 1, message_count = message_count + $4,
		updated_ns = CASE WHEN $5::bigint > updated_ns THEN $5::bigint ELSE updated_ns + 1000 END,
		search_count = CASE WHEN search_count = message_count THEN message_count + $4 ELSE search_count END
	WHERE %s AND ($3::bigint = 0 OR revision = $3::bigint) AND open_message_id IS NULL
		AND NOT ($9::boolean AND get_byte(meta, 1) = 0)
		AND NOT EXISTS (SELECT 1 FROM unnest($6::text[]) AS sent(mid)
			WHERE (SELECT true FROM messages m WHERE m.session_id = sessions.id AND m.msg_id = sent.mid))
	RETURNING id, updated_ns, revision, message_count, search_count
), m AS (
	INSERT INTO messages (session_id, pos, msg_id, body, revision, updated_ns)
	SELECT s.id, s.message_count - $4 + t.ord - 1, t.mid, t.body, s.revision, s.updated_ns
	FROM s, unnest($7::text[], $8::bytea[]) WITH ORDINALITY AS t(mid, body, ord)
), i AS (
	INSERT INTO message_search (session_id, pos, sig)
	SELECT s.id, s.message_count - $4 + t.ord - 1, t.sig
	FROM s, unnest($10::bit(2048)[]) WITH ORDINALITY AS t(sig, ord)
	WHERE s.search_count = s.message_count
)
SELECT id::text, revision, message_count FROM s`

// The append statement for each kind of ref.
var (
	appendFastByID    = fmt.Sprintf(appendFastSQL, "namespace = $1 AND id = $2::uuid")
	appendFastByAlias = fmt.Sprintf(appendFastSQL, "namespace = $1 AND alias = $2")
)

// messageKey is the unique key on (session, message id).
const messageKey = "messages_session_id_msg_id_key"

// appendFast tries the append as appendFastSQL, through the group commit
// (runFast); ok is false when the append must take the general path.
func (s *Store) appendFast(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (res storage.AppendResult, ok bool, err error) {
	ids, bodies, err := messageRows(msgs.Prepared, msgs.Encoded)
	if err != nil || len(ids) == 0 {
		return res, false, err
	}
	ref, byID := req.Ref.ID, true
	if ref == "" {
		ref, byID = req.Ref.Alias, false
	}
	n := int64(len(ids))
	a := &fastAppend{
		ctx: ctx, ns: req.Ref.Namespace, ref: ref, byID: byID, key: req.Ref.Namespace + "\x00" + ref,
		expected: int64(req.ExpectedRevision), nowNS: time.Now().UnixNano(), sent: msgs.SentIDs(),
		msgIDs: ids, bodies: bodies, sigs: signatures(msgs.Prepared), titles: storage.CanTitle(msgs.Prepared),
		next: make(chan []*fastAppend, 1),
	}
	m, err := s.runFast(a)
	if m == nil || err != nil {
		return res, false, err
	}
	m.res.Appended = n
	return m.res, true, nil
}

func (s *Store) appendOn(ctx context.Context, conn *pgxpool.Conn, req storage.AppendRequest, msgs storage.Messages, w *wtx) (storage.AppendResult, error) {
	where, args := refWhere(req.Ref)
	ids := msgs.SentIDs()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT "+sessionCols+" FROM sessions WHERE "+where+" FOR UPDATE", args...)
	if len(ids) > 0 {
		// Read after the lock is granted (read committed: a fresh
		// snapshot per statement), so it sees every earlier append.
		b.Queue(`SELECT msg_id, body FROM messages WHERE session_id = (SELECT id FROM sessions WHERE `+where+`) AND msg_id = ANY($3)`,
			append(args, ids)...)
	}
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return storage.AppendResult{}, err
	}
	cur, err := scanSession(br.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		err = notFound(req.Ref)
	}
	if err != nil {
		_ = br.Close()
		return storage.AppendResult{}, err
	}
	stored := map[string][]byte{}
	if len(ids) > 0 {
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return storage.AppendResult{}, err
		}
		var id string
		var body []byte
		if _, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error {
			stored[id] = body // pgx scans each row into a fresh slice
			return nil
		}); err != nil {
			_ = br.Close()
			return storage.AppendResult{}, err
		}
	}
	if err := br.Close(); err != nil {
		return storage.AppendResult{}, err
	}
	base := cur.Tally
	if base.Unknown {
		// Written before schema version 3: count the stored messages once.
		stored, err := readMessages(ctx, conn, cur.ID, 0, -1)
		if err != nil {
			return storage.AppendResult{}, err
		}
		base = storage.Recount(stored)
	}
	fresh, err := storage.CheckAppend(cur.ID, msgs, req.ExpectedRevision, cur.Revision, base, func(id string) (*sessiondv1.Message, bool, error) {
		b, ok := stored[id]
		if !ok {
			return nil, false, nil
		}
		m, err := decode(cur.ID, b)
		return m, err == nil, err
	})
	if err != nil {
		return storage.AppendResult{}, err
	}
	if len(fresh.Prepared) == 0 {
		_, err := conn.Exec(ctx, "COMMIT")
		return storage.AppendResult{Revision: cur.Revision, MessageCount: cur.MessageCount}, err
	}
	b = &pgx.Batch{}
	if err := queueMessages(b, cur.ID, cur.MessageCount, fresh.Prepared, fresh.Encoded); err != nil {
		return storage.AppendResult{}, err
	}
	n := int64(len(fresh.Prepared))
	m := cur
	m.Revision, m.MessageCount, m.UpdatedAt = cur.Revision+1, cur.MessageCount+n, now(cur.UpdatedAt)
	m.Tally = fresh.Tally
	titled := storage.DeriveTitle(m, fresh.Prepared)
	bump, err := bumpArgs(m)
	if err != nil {
		return storage.AppendResult{}, err
	}
	if titled {
		b.Queue(bumpTitledSession, append(bump, encodeMeta(m))...)
	} else {
		b.Queue(bumpSession, bump...)
	}
	if err := queueEvent(b, w, storage.EventAppended, m, len(fresh.Prepared)); err != nil {
		return storage.AppendResult{}, err
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return storage.AppendResult{}, err
	}
	return storage.AppendResult{Revision: m.Revision, MessageCount: m.MessageCount, Appended: n}, nil
}

// Update changes the fields req names; the no-op rule is ApplyUpdate's.
func (s *Store) Update(ctx context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.withTx(ctx, func(tx *wtx) error {
		cur, err := getSession(ctx, tx, req.Ref, "FOR UPDATE")
		if err != nil {
			return err
		}
		next, changed := storage.ApplyUpdate(cur, req)
		if !changed {
			out = cur
			return nil
		}
		if err := storage.CheckRevision(cur.ID, req.ExpectedRevision, cur.Revision); err != nil {
			return err
		}
		next.Revision, next.UpdatedAt = cur.Revision+1, now(cur.UpdatedAt)
		if err := updateSession(ctx, tx, next); err != nil {
			return err
		}
		out = clone(next)
		return addEvent(ctx, tx, storage.EventUpdated, next)
	})
	return out, err
}

// Delete removes a session; its watchers get EventDeleted.
func (s *Store) Delete(ctx context.Context, ref storage.Ref, expectedRevision uint64) error {
	return s.withTx(ctx, func(tx *wtx) error {
		cur, err := getSession(ctx, tx, ref, "FOR UPDATE")
		if err != nil {
			return err
		}
		if err := storage.CheckRevision(cur.ID, expectedRevision, cur.Revision); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, cur.ID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE session_id = $1`, cur.ID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM message_search WHERE session_id = $1`, cur.ID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM events WHERE session_id = $1`, cur.ID); err != nil {
			return err
		}
		cur.Revision++
		return addEvent(ctx, tx, storage.EventDeleted, cur)
	})
}

// Fork copies a session's first messages into a new session.
func (s *Store) Fork(ctx context.Context, req storage.ForkRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.withTx(ctx, func(tx *wtx) error {
		src, err := getSession(ctx, tx, req.Ref, "FOR SHARE")
		if err != nil {
			return err
		}
		n := req.MessageCount
		if n == 0 {
			n = src.MessageCount
		}
		if err := storage.CheckCount(src.ID, n, src.MessageCount); err != nil {
			return err
		}
		kept, err := readMessages(ctx, tx, src.ID, 0, n)
		if err != nil {
			return err
		}
		t := now(time.Time{})
		m := &storage.Session{
			ID: uuid.Must(uuid.NewV7()).String(), Namespace: src.Namespace, Alias: req.Alias, Title: src.Title, TitleDerived: src.TitleDerived, Summary: src.Summary,
			CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: n,
			Metadata: maps.Clone(src.Metadata), Labels: maps.Clone(src.Labels),
			Parent: &storage.ForkOrigin{SessionID: src.ID, MessageCount: n},
			Tally:  storage.Recount(kept), ExpireAfter: src.ExpireAfter,
		}
		if req.Title != "" {
			m.Title, m.TitleDerived = req.Title, false
		}
		if src.Compaction != nil {
			if m.Compaction, err = latestCompaction(ctx, tx, src.ID, n); err != nil {
				return err
			}
		}
		out, err = s.insertNew(ctx, tx, m, func() error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO messages (session_id, pos, msg_id, body)
				SELECT $1, pos, msg_id, body FROM messages WHERE session_id = $2 AND pos < $3`, m.ID, src.ID, n)
			// The copies are indexed as far as the source is.
			b.Queue(`INSERT INTO message_search (session_id, pos, sig)
				SELECT $1, pos, sig FROM message_search WHERE session_id = $2 AND pos < $3`, m.ID, src.ID, n)
			b.Queue(`UPDATE sessions SET search_count = (SELECT count(*) FROM message_search WHERE session_id = $1) WHERE id = $1`, m.ID)
			if err := tx.SendBatch(ctx, b).Close(); err != nil || m.Compaction == nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO compactions (session_id, seq, revision, through_count, through_id, created_ns, summary_id, summary)
				SELECT $1, seq, revision, through_count, through_id, created_ns, summary_id, summary FROM compactions
				WHERE session_id = $2 AND through_count <= $3`, m.ID, src.ID, n)
			return err
		})
		return err
	})
	return out, err
}

// Rewind keeps a session's first messages.
func (s *Store) Rewind(ctx context.Context, req storage.RewindRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.withTx(ctx, func(tx *wtx) error {
		cur, err := getSession(ctx, tx, req.Ref, "FOR UPDATE")
		if err != nil {
			return err
		}
		if err := storage.CheckCount(cur.ID, req.MessageCount, cur.MessageCount); err != nil {
			return err
		}
		if req.MessageCount == cur.MessageCount {
			out = cur
			return nil
		}
		if err := storage.CheckRevision(cur.ID, req.ExpectedRevision, cur.Revision); err != nil {
			return err
		}
		if err := keepEventMessages(ctx, tx, cur.ID, req.MessageCount, cur.Revision); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE session_id = $1 AND pos >= $2`, cur.ID, req.MessageCount); err != nil {
			return err
		}
		if err := dropSearch(ctx, tx, cur.ID, req.MessageCount); err != nil {
			return err
		}
		kept, err := readMessages(ctx, tx, cur.ID, 0, req.MessageCount)
		if err != nil {
			return err
		}
		m := clone(cur)
		m.MessageCount, m.Revision, m.UpdatedAt = req.MessageCount, cur.Revision+1, now(cur.UpdatedAt)
		m.Tally = storage.Recount(kept)
		if cur.Compaction != nil {
			// The compactions reaching past the kept messages go, the
			// latest's or earlier ones'.
			if _, err := tx.Exec(ctx, `DELETE FROM compactions WHERE session_id = $1 AND through_count > $2`, cur.ID, req.MessageCount); err != nil {
				return err
			}
		}
		if cur.Compaction != nil && cur.Compaction.ThroughCount > req.MessageCount {
			// The latest of the others, if any, is the session's now.
			if m.Compaction, err = latestCompaction(ctx, tx, cur.ID, req.MessageCount); err != nil {
				return err
			}
			if err := updateSession(ctx, tx, m); err != nil {
				return err
			}
			out = clone(m)
			return addEvent(ctx, tx, storage.EventReplaced, m)
		}
		bump, err := bumpArgs(m)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, bumpSession, bump...); err != nil {
			return err
		}
		out = clone(m)
		return addEvent(ctx, tx, storage.EventReplaced, m)
	})
	return out, err
}

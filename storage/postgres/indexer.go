package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"
)

// The search indexer: the one-statement append signs its messages itself
// while its session's messages are all indexed (appendFastSQL); for the
// messages any other write stores, each Store's indexer writes the
// signatures of their search text (signature.go) into message_search in
// batches, a session's messages in order from sessions.search_count,
// which it then moves. A pass reads,
// in one statement and without locks, the sessions with messages to index
// (sessions_unindexed, oldest change first) and those messages; then, in
// one transaction, it inserts the signatures of the sessions whose
// search_count and search_epoch are still what it read (indexedSQL, no
// locks: appends wait for nothing while the bulk of the pass is written),
// and moves those sessions' search_count under their row locks
// (indexedMoveSQL), which it holds only for that short statement and the
// commit. A session a rewind, save or delete changed meanwhile (its epoch
// changes, or its row goes), or that another replica's indexer got to
// first, fails the second check: the pass rolls back, and the next one
// reads again. The row locks are taken in the order the group commit
// takes them (the sessions' ids, whatever their namespaces), so indexing
// never deadlocks with appends. An open
// message waits for its close. Search reads the messages not indexed yet
// from their rows, so the indexer's lag costs search some reading, never a
// hit.

const (
	// indexInterval is how long an indexer that found nothing more to
	// index waits before it looks again: a message is indexed within
	// about this long (and one pass) of its append when the indexer keeps
	// up. Each pass writes a new version of every session row it moves,
	// so a longer wait shares that among more appends.
	indexInterval = time.Second
	// indexSessions and indexPerSession bound a pass: the sessions it
	// reads and the messages of each it indexes.
	indexSessions   = 32
	indexPerSession = 256
)

// unindexed is sessions_unindexed's condition: some messages of the
// session are not indexed, not counting an open message.
const unindexed = `search_count < message_count - (open_message_id IS NOT NULL)::int`

// unindexedSQL reads a pass's sessions (arguments: indexSessions,
// indexPerSession), each with the range of positions to index and its
// epoch, and the messages in that range, in no particular order: sorting
// them would copy every body once more, and indexPass places each by its
// position.
const unindexedSQL = `WITH p AS (
	SELECT id, search_count AS lo, least(message_count - (open_message_id IS NOT NULL)::int, search_count + $2) AS hi, search_epoch
	FROM sessions WHERE ` + unindexed + ` ORDER BY updated_ns LIMIT $1
)
SELECT p.id::text, p.lo, p.hi, p.search_epoch, m.pos, m.body
FROM p JOIN messages m ON m.session_id = p.id AND m.pos >= p.lo AND m.pos < p.hi`

// indexedSQL writes a pass's signatures (arguments: the sessions' ids,
// first and end positions and epochs; the messages' session ids, positions
// and signatures) for the sessions still as the pass read them, and
// returns those sessions' ids. A row it overwrites (ON CONFLICT) belongs to
// a session whose search_count is at or before its position, whose
// signature search does not read. The rows go in key order, so that two
// replicas' passes that write the same rows wait for each other instead
// of deadlocking.
const indexedSQL = `WITH t AS (
	SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t(sid, lo, hi, epoch)
), i AS (
	INSERT INTO message_search (session_id, pos, sig)
	SELECT x.sid, x.pos, x.sig FROM unnest($5::uuid[], $6::bigint[], $7::bit(2048)[]) AS x(sid, pos, sig)
	WHERE x.sid IN (SELECT s.id FROM sessions s JOIN t ON s.id = t.sid WHERE s.search_count = t.lo AND s.search_epoch = t.epoch)
	ORDER BY x.sid, x.pos
	ON CONFLICT (session_id, pos) DO UPDATE SET sig = EXCLUDED.sig
	RETURNING session_id
)
SELECT DISTINCT session_id::text FROM i`

// indexedMoveSQL moves the search_count of the sessions indexedSQL wrote
// (arguments: their ids, first and end positions and epochs) if each is
// still as the pass read it, under their row locks taken in id order, and
// returns how many it moved.
const indexedMoveSQL = `WITH t AS (
	SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t(sid, lo, hi, epoch)
), l AS (
	SELECT s.id, t.hi FROM sessions s JOIN t ON s.id = t.sid
	WHERE s.search_count = t.lo AND s.search_epoch = t.epoch
	ORDER BY s.id
	FOR UPDATE OF s
), u AS (
	UPDATE sessions s SET search_count = l.hi FROM l WHERE s.id = l.id RETURNING s.id
)
SELECT count(*) FROM u`

// indexRange is one session's part of a pass.
type indexRange struct {
	id            string
	lo, hi, epoch int64
	sigs          []pgtype.Bits // by position from lo; Valid once read
}

// indexPass indexes one batch; more says whether it was full (more work
// may be waiting).
func (s *Store) indexPass(ctx context.Context) (more bool, err error) {
	rows, err := s.pool.Query(ctx, unindexedSQL, indexSessions, indexPerSession)
	if err != nil {
		return false, err
	}
	var (
		ranges        []*indexRange
		byID          = map[string]*indexRange{}
		id            string
		lo, hi, epoch int64
		pos           int64
		body          []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &lo, &hi, &epoch, &pos, &body}, func() error {
		r := byID[id]
		if r == nil {
			r = &indexRange{id: id, lo: lo, hi: hi, epoch: epoch, sigs: make([]pgtype.Bits, max(hi-lo, 0))}
			byID[id] = r
			ranges = append(ranges, r)
		}
		if pos < r.lo || pos >= r.hi {
			return nil
		}
		// A message stored damaged is indexed as empty, so that its
		// session's later messages are indexed; search skips the
		// session when it decodes its messages.
		if m, err := decode(id, body); err == nil {
			r.sigs[pos-r.lo] = messageSignature(m)
		} else {
			s.log.Warn("postgres: a message that does not decode is indexed as empty", zap.String("session", id), zap.Int64("position", pos))
			r.sigs[pos-r.lo], _ = signature("")
		}
		return nil
	}); err != nil {
		return false, err
	}
	if len(ranges) == 0 {
		return false, nil
	}
	more = len(ranges) == indexSessions
	var (
		sids []string
		poss []int64
		sigs []pgtype.Bits
	)
	for _, r := range ranges {
		// Index only what was read without a gap from lo: the
		// messages a pass read are those its one snapshot held.
		for i, sig := range r.sigs {
			if !sig.Valid {
				r.sigs = r.sigs[:i]
				break
			}
		}
		r.hi = r.lo + int64(len(r.sigs))
		more = more || len(r.sigs) == indexPerSession
		for i, sig := range r.sigs {
			sids, poss, sigs = append(sids, r.id), append(poss, r.lo+int64(i)), append(sigs, sig)
		}
	}
	err = s.writeIndexed(ctx, ranges, sids, poss, sigs)
	if errors.Is(err, errIndexRaced) {
		return true, nil
	}
	return more, err
}

// writeIndexed writes a pass: the signatures sigs (of the messages at
// positions poss of sessions sids) of ranges, then each written session's
// new search_count, in one transaction that it rolls back when a session
// changed between the two.
func (s *Store) writeIndexed(ctx context.Context, ranges []*indexRange, sids []string, poss []int64, sigs []pgtype.Bits) error {
	cols := func(keep func(*indexRange) bool) []any {
		var (
			ids             []string
			los, his, epchs []int64
		)
		for _, r := range ranges {
			if keep(r) {
				ids, los, his, epchs = append(ids, r.id), append(los, r.lo), append(his, r.hi), append(epchs, r.epoch)
			}
		}
		return []any{uuidArgs(ids), los, his, epchs}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, indexedSQL, append(cols(func(*indexRange) bool { return true }), uuidArgs(sids), poss, encodeSigs(sigs))...)
		if err != nil {
			return err
		}
		written, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(written) == 0 {
			return err
		}
		move := cols(func(r *indexRange) bool { return slices.Contains(written, r.id) })
		var moved int64
		if err := tx.QueryRow(ctx, indexedMoveSQL, move...).Scan(&moved); err != nil {
			return err
		}
		if moved != int64(len(written)) {
			return errIndexRaced
		}
		return nil
	})
}

// errIndexRaced rolls back a pass whose sessions changed while it wrote:
// the next pass reads them again.
var errIndexRaced = errors.New("postgres: a session changed during a search indexing pass")

package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// The search indexer: appends write nothing search needs, and each
// Store's indexer writes the signatures of their search text (signature.go)
// into message_search in batches, a session's messages in order from
// sessions.search_count, which it then moves. A pass reads,
// in one statement and without locks, the sessions with messages to index
// (sessions_unindexed, oldest change first) and those messages; then, in
// one statement, it moves each session's search_count and inserts the
// signatures, for the sessions whose search_count and search_epoch are still
// what it read: a rewind, save or delete meanwhile (which changes the
// epoch or removes the row), or another replica's indexer that got there
// first, leaves that session to a later pass. The row locks that takes
// are held for that one statement, and taken in the order the group
// commit takes them (the sessions' ids, whatever their namespaces), so
// indexing never deadlocks with appends. An open
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
	// indexRetry is how long the indexer waits after a failed pass (the
	// database unreachable, say).
	indexRetry = time.Second
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

// indexedSQL writes a pass (arguments: the sessions' ids, first and end
// positions and epochs; the messages' session ids, positions and signatures).
const indexedSQL = `WITH t AS (
	SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t(sid, lo, hi, epoch)
), l AS (
	SELECT s.id, t.hi FROM sessions s JOIN t ON s.id = t.sid
	WHERE s.search_count = t.lo AND s.search_epoch = t.epoch
	ORDER BY s.id
	FOR UPDATE OF s
), u AS (
	UPDATE sessions s SET search_count = l.hi FROM l WHERE s.id = l.id RETURNING s.id
)
INSERT INTO message_search (session_id, pos, sig)
SELECT x.sid, x.pos, x.sig FROM unnest($5::uuid[], $6::bigint[], $7::bit(2048)[]) AS x(sid, pos, sig)
WHERE x.sid IN (SELECT id FROM u)
ON CONFLICT (session_id, pos) DO UPDATE SET sig = EXCLUDED.sig`

// indexer runs passes until ctx ends, one after another while there is
// work, else every indexInterval; after a failure, every indexRetry until
// a pass succeeds, saying so once.
func (s *Store) indexer(ctx context.Context) {
	defer close(s.indexDone)
	failing := false
	for ctx.Err() == nil {
		more, err := s.indexPass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				s.log.Warn("postgres: search indexing failed; retrying (search reads what is not indexed from the messages meanwhile)",
					zap.String("error", safeText(mapErr(err))))
			}
			failing = true
			sleep(ctx, indexRetry)
		case !more:
			failing = false
			sleep(ctx, indexInterval)
		default:
			failing = false
		}
	}
}

// indexRange is one session's part of a pass.
type indexRange struct {
	id            string
	lo, hi, epoch int64
	sigs          []pgtype.Bits // by position from lo; Valid once read
}

// indexPass indexes one batch; more says whether it was full (more work
// may be waiting).
func (s *Store) indexPass(ctx context.Context) (more bool, err error) {
	err = s.call(func() error {
		rows, err := s.pool.Query(ctx, unindexedSQL, indexSessions, indexPerSession)
		if err != nil {
			return err
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
			text := ""
			if m, err := decode(id, body); err == nil {
				text = searchText(storage.MessageTexts(m)...)
			} else {
				s.log.Warn("postgres: a message that does not decode is indexed as empty", zap.String("session", id), zap.Int64("position", pos))
			}
			r.sigs[pos-r.lo], _ = signature(text)
			return nil
		}); err != nil {
			return err
		}
		if len(ranges) == 0 {
			return nil
		}
		more = len(ranges) == indexSessions
		var (
			ids             []string
			los, his, epchs []int64
			sids            []string
			poss            []int64
			sigs            []pgtype.Bits
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
			ids, los, his, epchs = append(ids, r.id), append(los, r.lo), append(his, r.hi), append(epchs, r.epoch)
			for i, sig := range r.sigs {
				sids, poss, sigs = append(sids, r.id), append(poss, r.lo+int64(i)), append(sigs, sig)
			}
		}
		_, err = s.pool.Exec(ctx, indexedSQL, uuidArgs(ids), los, his, epchs, uuidArgs(sids), poss, encodeSigs(sigs))
		return err
	})
	return more, err
}

package postgres

import (
	"context"
	"time"
)

// The trimmer: a finish leaves its session's events rows as the open
// message's bound kept them, and marks the session with when they may go
// (finishSession). Each Store's trimmer takes, every trimInterval, the
// sessions whose mark is due and trims their rows back to historyEvents
// revisions. The mark lives in the session's row, so a restart or a
// replica that stopped loses none: any replica's trimmer takes it.
//
// A pass is one statement (trimSQL): it locks the due sessions' rows in
// the order of their ids, as the group commit does, skipping those
// another transaction holds (a write in flight, or another replica's
// trimmer: no session is trimmed twice at once, and the pass never waits
// for a row lock, so it cannot deadlock with appends), trims their rows
// and clears their marks. Only holders of a session's row lock write its
// events rows, so the trim waits for no other lock either. A write that
// committed after the statement's snapshot but before its lock is seen in
// the locked row (read committed rechecks it), not in the events rows the
// trim reads: the trim then keeps more, never less, than the history. A
// session whose next message opened meanwhile loses only its mark: its
// open message's bound governs its rows until its own finish marks it
// again.
// A watcher behind the rows the trim leaves finds the gap and is reset
// (ErrWatchReset), as one behind any trim.

const (
	// finishGrace is how long a finish keeps the rows of its message's
	// deltas. A watcher on another replica reads them at the finish's
	// notification, or at its next poll (2 s by default) when that is
	// lost, a page at a time as its reader makes room (up to 2 s a page,
	// catchUpDrain); the grace covers both with room for a loaded
	// machine. It bounds what finished turns hold: at most the deltas
	// of the turns finished in the last finishGrace (and trimInterval).
	finishGrace = 10 * time.Second
	// trimInterval is how often a trimmer looks for sessions due.
	trimInterval = time.Second
	// trimSessions bounds the sessions a pass trims; a full pass is
	// followed by another at once.
	trimSessions = 64
)

// dbNowNS is PostgreSQL's clock in Unix nanoseconds. The finish's mark and
// the trimmer both read it, so the grace holds whatever the replicas'
// clocks say.
const dbNowNS = `(extract(epoch FROM statement_timestamp()) * 1000000000)::bigint`

// trimSQL trims the events rows of at most $1 sessions whose mark is due
// (the longest due first, found through sessions_events_trim) back to the
// newest row at or before their last $2 revisions, and clears their marks;
// it returns how many it took.
const trimSQL = `WITH l AS (
	SELECT id, revision, open_message_id IS NULL AS closed FROM sessions
	WHERE id = ANY (ARRAY(SELECT id FROM sessions WHERE events_trim_ns <= ` + dbNowNS + ` ORDER BY events_trim_ns LIMIT $1))
		AND events_trim_ns <= ` + dbNowNS + `
	ORDER BY id FOR UPDATE SKIP LOCKED
), d AS (
	DELETE FROM events e USING l WHERE l.closed AND e.session_id = l.id
		AND e.revision < (SELECT max(b.revision) FROM events b WHERE b.session_id = l.id AND b.revision <= l.revision - $2)
), u AS (
	UPDATE sessions s SET events_trim_ns = NULL WHERE s.id = ANY (ARRAY(SELECT id FROM l)) RETURNING s.id
)
SELECT count(*) FROM u`

// trimPass trims one batch of the sessions due; more says whether it was
// full (more may be due).
func (s *Store) trimPass(ctx context.Context) (more bool, err error) {
	var n int
	err = s.pool.QueryRow(ctx, trimSQL, trimSessions, int64(historyEvents)).Scan(&n)
	return n == trimSessions, err
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Live turns: the open message is a messages row like any other, rewritten
// in place by each delta (so that a load and a search see its text so
// far) and by the finish that closes it. Each change is one
// transaction under the session's row lock that bumps the revision and
// adds its event: a delta event keeps the delta as applied, a finish event
// the closed message, so that a watcher on any replica reads every delta
// once and in order from the events table, as it reads every other change.

var _ storage.LiveDriver = (*Store)(nil)

// While a session has an open message, its events rows cover its last
// liveHistoryEvents revisions instead of historyEvents: deltas come in
// bursts of one revision each, and a watcher on another replica that is
// slow to read for a moment would otherwise find them trimmed and be
// reset mid-message. The rows are bounded twice: by count, and by
// liveHistoryBytes of the session's columns every row repeats (so a
// session with large metadata keeps fewer, never fewer than
// historyEvents); their deltas add up to at most the open message.
//
// The finish keeps that bound for finishGrace more (so does every write
// with an events row meanwhile: a tool call's answer comes right after its
// turn), so that a watcher that was within it when the message closed
// still reads the rest of the turn: it marks the session
// (sessions.events_trim_ns, when its rows reach past historyEvents
// revisions), and the trimmer (trim.go) then takes them back to
// historyEvents. A save or rewind (EventReplaced) trims back at once (it
// makes every watcher reload anyway, and its copy of the appends in the
// history, keepEventMessages, covers historyEvents revisions). A resume with from_revision keeps the
// bound of historyEvents, as on the file store.
const (
	liveHistoryEvents = 4 * storage.WatchBuffer
	liveHistoryBytes  = 1 << 20
	eventRowBytes     = 128 // an events row's own columns, header and index entry
)

// liveKept is how many revisions of its session's history a write keeps
// while the session has an open message or a finish's grace: its row
// repeats repeated bytes of the session's columns.
func liveKept(repeated int) int64 {
	return max(historyEvents, min(liveHistoryEvents, liveHistoryBytes/int64(eventRowBytes+repeated)))
}

// AppendDelta adds to the session's open message in one transaction.
func (s *Store) AppendDelta(ctx context.Context, req storage.DeltaRequest, limits storage.Limits) (storage.DeltaResult, error) {
	var out storage.DeltaResult
	err := s.liveWrite(ctx, req.Ref, req.Delta.GetMessageId(), func(cur *storage.Session, at *liveMessage, b *pgx.Batch, w *wtx) error {
		next, open, enc, applied, err := storage.CheckDelta(cur.ID, cur.Tally, req.Delta, limits, at.stored)
		if err != nil {
			return err
		}
		if next == nil {
			out = storage.DeltaResultOf(cur.Revision, open)
			return nil
		}
		raw, err := proto.Marshal(applied)
		if err != nil {
			return fmt.Errorf("postgres: encode a delta of session %s: %w", cur.ID, err)
		}
		m := clone(cur)
		m.Revision, m.UpdatedAt = cur.Revision+1, now(cur.UpdatedAt)
		queueRewrite(b, m.ID, at.pos, enc)
		b.Queue(`UPDATE sessions SET updated_ns = $2, revision = $3 WHERE id = $1`, m.ID, m.UpdatedAt.UnixNano(), int64(m.Revision))
		if err := queueEventRow(b, w, storage.EventDelta, m, 0, raw, nil); err != nil {
			return err
		}
		out = storage.DeltaResultOf(m.Revision, next)
		return nil
	})
	return out, err
}

// FinishMessage closes the session's open message in one transaction.
func (s *Store) FinishMessage(ctx context.Context, req storage.FinishRequest, limits storage.Limits) (storage.FinishResult, error) {
	var out storage.FinishResult
	err := s.liveWrite(ctx, req.Ref, req.MessageID, func(cur *storage.Session, at *liveMessage, b *pgx.Batch, w *wtx) error {
		closed, stored, enc, tally, err := storage.CheckFinish(cur.ID, cur.Tally, cur.UpdatedAt, req, limits, at.stored)
		if err != nil {
			return err
		}
		if closed == nil {
			out = storage.FinishResult{Revision: cur.Revision, Message: stored}
			return nil
		}
		m := clone(cur)
		m.Revision, m.UpdatedAt, m.Tally = cur.Revision+1, now(cur.UpdatedAt), tally
		queueRewrite(b, m.ID, at.pos, enc)
		bump, err := bumpArgs(m)
		if err != nil {
			return err
		}
		b.Queue(finishSession, append(bump, s.finishGrace.Nanoseconds(), int64(historyEvents))...)
		if err := queueEventRow(b, w, storage.EventFinished, m, 0, nil, [][]byte{enc}); err != nil {
			return err
		}
		out = storage.FinishResult{Revision: m.Revision, Message: proto.Clone(closed).(*sessiondv1.Message), Closed: true}
		return nil
	})
	return out, err
}

// finishSession is bumpSession for a finish, which also marks the session
// for the trimmer ($8: the grace in nanoseconds from now, by PostgreSQL's
// clock) when the open message's bound kept rows past historyEvents ($9)
// revisions: two rows at or before the start of that history (the newest
// of them stays).
const finishSession = bumpModels + bumpSet + `, events_trim_ns = CASE WHEN (SELECT count(*) FROM (
		SELECT FROM events WHERE session_id = $1 AND revision <= $3::bigint - $9::bigint LIMIT 2) o) = 2 THEN ` + dbNowNS + ` + $8::bigint END
	WHERE id = $1`

// Streaming yields the sessions with an open message last changed before
// idleBefore (index sessions_streaming), read before the first yield.
func (s *Store) Streaming(ctx context.Context, idleBefore time.Time, yield func(*storage.Session) error) error {
	found, err := collectSessions(s.pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE open_message_id IS NOT NULL AND updated_ns < $1`, idleBefore.UnixNano()))
	if err != nil {
		return wrapErr(err)
	}
	for _, m := range found {
		if err := yield(m); err != nil {
			return err
		}
	}
	return nil
}

// liveMessage is the stored message a live write names, read under the
// session's row lock.
type liveMessage struct {
	id     string
	pos    int64
	body   []byte // nil: the session has no message with that id
	stored storage.StoredFunc
}

// queueRewrite queues the rewrite of session id's message at pos as enc.
// An open message is not indexed (the indexer waits for its close), so
// search reads its text from the row.
func queueRewrite(b *pgx.Batch, id string, pos int64, enc []byte) {
	b.Queue(`UPDATE messages SET body = $3 WHERE session_id = $1 AND pos = $2`, id, pos, enc)
}

// liveWrite runs a write to ref's message msgID as one transaction in two
// round trips: BEGIN, the session's row lock and the message in the first;
// then fn decides with the rules and queues its writes into b, which go
// with COMMIT in the second (a no-op queues nothing and only commits).
// The watchers of the sessions whose events fn queued wake after the
// commit.
func (s *Store) liveWrite(ctx context.Context, ref storage.Ref, msgID string, fn func(cur *storage.Session, at *liveMessage, b *pgx.Batch, w *wtx) error) error {
	return wrapErr(s.onConn(ctx, func(conn *pgxpool.Conn, w *wtx) error {
		where, args := refWhere(ref)
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT "+sessionCols+" FROM sessions WHERE "+where+" FOR UPDATE", args...)
		// Read after the lock is granted (read committed: a fresh
		// snapshot per statement), so it sees every earlier write.
		b.Queue(`SELECT pos, body FROM messages WHERE session_id = (SELECT id FROM sessions WHERE `+where+`) AND msg_id = $3`,
			append(args, msgID)...)
		br := conn.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
		cur, err := scanSession(br.QueryRow())
		if errors.Is(err, pgx.ErrNoRows) {
			err = notFound(ref)
		}
		if err != nil {
			_ = br.Close()
			return err
		}
		at := &liveMessage{id: msgID}
		if err := br.QueryRow().Scan(&at.pos, &at.body); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			_ = br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		at.stored = func(id string) (*sessiondv1.Message, bool, error) {
			if id != at.id {
				return nil, false, fmt.Errorf("postgres: a live write to message %q of session %s read message %q", at.id, cur.ID, id)
			}
			if at.body == nil {
				return nil, false, nil
			}
			m, err := decode(cur.ID, at.body)
			return m, err == nil, err
		}
		b = &pgx.Batch{}
		if err := fn(cur, at, b, w); err != nil {
			return err
		}
		b.Queue("COMMIT")
		return conn.SendBatch(ctx, b).Close()
	}))
}

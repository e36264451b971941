package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Compact stores a compaction: a compactions row, and the session's new
// revision with the compaction's range in its metadata, in one
// transaction holding the session's row lock.
func (s *Store) Compact(ctx context.Context, req storage.CompactRequest, summary storage.Messages) (*storage.Session, error) {
	var out *storage.Session
	err := s.withTx(ctx, func(tx *wtx) error {
		cur, err := getSession(ctx, tx, req.Ref, "FOR UPDATE")
		if err != nil {
			return err
		}
		var pos int64
		err = tx.QueryRow(ctx, `SELECT pos FROM messages WHERE session_id = $1 AND msg_id = $2`, cur.ID, req.ThroughMessageID).Scan(&pos)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ThroughNotFound(cur.ID, req.ThroughMessageID)
		}
		if err != nil {
			return err
		}
		after, err := readMessages(ctx, tx, cur.ID, pos+1, -1)
		if err != nil {
			return err
		}
		noop, err := storage.CheckCompact(cur, req, pos, func() (*sessiondv1.Message, error) {
			return readSummary(ctx, tx, cur)
		}, after)
		if err != nil {
			return err
		}
		if noop {
			out = cur
			return nil
		}
		m := clone(cur)
		m.Revision, m.UpdatedAt = cur.Revision+1, now(cur.UpdatedAt)
		m.Compaction = &storage.Compaction{ThroughCount: pos + 1, ThroughID: req.ThroughMessageID, Revision: m.Revision,
			CreatedAt: m.UpdatedAt, SummaryID: summary.Prepared[0].GetId()}
		_, err = tx.Exec(ctx, `INSERT INTO compactions (session_id, seq, revision, through_count, through_id, created_ns, summary_id, summary)
			VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM compactions WHERE session_id = $1), $2, $3, $4, $5, $6, $7)`, m.ID, int64(m.Revision), pos+1, req.ThroughMessageID,
			m.UpdatedAt.UnixNano(), m.Compaction.SummaryID, summary.Encoded[0])
		if err != nil {
			return err
		}
		if err := updateSession(ctx, tx, m); err != nil {
			return err
		}
		out = clone(m)
		return addEvent(ctx, tx, storage.EventCompacted, m)
	})
	return out, err
}

// readSummary reads the summary of se's latest compaction.
func readSummary(ctx context.Context, tx pgx.Tx, se *storage.Session) (*sessiondv1.Message, error) {
	var body []byte
	err := tx.QueryRow(ctx, `SELECT summary FROM compactions WHERE session_id = $1 ORDER BY seq DESC LIMIT 1`, se.ID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: session %s lacks the summary of its compaction at revision %d: %w", se.ID, se.Compaction.Revision, storage.ErrDataLoss)
	}
	if err != nil {
		return nil, err
	}
	return decode(se.ID, body)
}

// latestCompaction returns the range of the latest of session id's
// compactions that lie within its first count messages, or nil.
func latestCompaction(ctx context.Context, tx pgx.Tx, id string, count int64) (*storage.Compaction, error) {
	var (
		c         storage.Compaction
		rev, nsec int64
	)
	err := tx.QueryRow(ctx, `SELECT revision, through_count, through_id, created_ns, summary_id FROM compactions
		WHERE session_id = $1 AND through_count <= $2 ORDER BY seq DESC LIMIT 1`, id, count).
		Scan(&rev, &c.ThroughCount, &c.ThroughID, &nsec, &c.SummaryID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.Revision, c.CreatedAt = uint64(rev), time.Unix(0, nsec).UTC()
	return &c, nil
}

// loadContext reads the context view's messages that opts selects of se,
// which has a compaction, in the load's snapshot.
func loadContext(ctx context.Context, tx pgx.Tx, se *storage.Session, opts storage.LoadOptions) ([]*sessiondv1.Message, error) {
	withSummary, from, to := opts.ContextWindow(se.MessageCount, se.Compaction.ThroughCount)
	out := make([]*sessiondv1.Message, 0, to-from+1)
	if withSummary {
		m, err := readSummary(ctx, tx, se)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if from >= to {
		return out, nil
	}
	rest, err := readMessages(ctx, tx, se.ID, from, to-from)
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}

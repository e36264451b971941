package file

import (
	"context"
	"fmt"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Compact stores a compaction with one journal record (recCompact). The
// messages are untouched: the record only adds to the session's list of
// compactions, which the next snapshot of the session carries whole.
func (s *Store) Compact(ctx context.Context, req storage.CompactRequest, summary storage.Messages) (*storage.Session, error) {
	return withLoaded(s, req.Ref, func(e *entry, v *view) (*storage.Session, error) {
		i, ok := e.ids[req.ThroughMessageID]
		if !ok {
			return nil, storage.ThroughNotFound(e.id, req.ThroughMessageID)
		}
		after := make([]*sessiondv1.Message, 0, len(v.msgs)-i-1)
		for j := i + 1; j < len(v.msgs); j++ {
			m, err := unmarshalMessage(e.id, v.at(j))
			if err != nil {
				return nil, err
			}
			after = append(after, m)
		}
		noop, err := storage.CheckCompact(v.meta, req, int64(i), func() (*sessiondv1.Message, error) {
			return unmarshalMessage(e.id, v.cs[len(v.cs)-1].Summary)
		}, after)
		if err != nil {
			return nil, err
		}
		if noop {
			return cloneMeta(v.meta), nil
		}
		s.beginWrite(e)
		m := cloneMeta(v.meta)
		m.Revision++
		m.UpdatedAt = now(v.meta.UpdatedAt)
		c := storage.StoredCompaction{Compaction: storage.Compaction{
			ThroughCount: int64(i) + 1, ThroughID: req.ThroughMessageID, Revision: m.Revision,
			CreatedAt: m.UpdatedAt, SummaryID: summary.Prepared[0].GetId(),
		}, Summary: summary.Encoded[0]}
		latest := c.Compaction
		m.Compaction = &latest
		rec := record{kind: recCompact, rev: m.Revision, updatedAt: m.UpdatedAt, compaction: &c}
		if err := s.writeJournal(e, encodeCommit([]record{rec}), 0); err != nil {
			return nil, fmt.Errorf("file: compact session %s: %w", e.id, err)
		}
		e.view.Store(v.with(m, append(v.cs[:len(v.cs):len(v.cs)], c)))
		s.setMeta(e, m)
		s.broker.Publish(e.id, storage.Event{Type: storage.EventCompacted, Revision: m.Revision, Session: cloneMeta(m)})
		s.maybeFold(e)
		return cloneMeta(m), nil
	})
}

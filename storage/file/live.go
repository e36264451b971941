package file

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Live turns: a delta is one journal record (recDelta) holding the delta
// as applied, not the message, and goes through the WAL like an append; a
// close is one record holding the closed message (recClose). The open
// message is always the session's last, so a write replaces the last
// entry of a new view.

var _ storage.LiveDriver = (*Store)(nil)

// AppendDelta adds to the session's open message with one durable journal
// record.
func (s *Store) AppendDelta(ctx context.Context, req storage.DeltaRequest, limits storage.Limits) (storage.DeltaResult, error) {
	return withLoaded(s, req.Ref, func(e *entry, v *view) (storage.DeltaResult, error) {
		next, open, enc, applied, err := storage.CheckDelta(e.id, v.meta.Tally, req.Delta, limits, e.stored(v))
		if err != nil {
			return storage.DeltaResult{}, err
		}
		if next == nil {
			return storage.DeltaResultOf(v.meta.Revision, open), nil
		}
		raw, err := proto.Marshal(applied)
		if err != nil {
			return storage.DeltaResult{}, fmt.Errorf("file: encode delta for session %s: %w", e.id, err)
		}
		m, err := s.replaceLast(e, v, "append a delta to", record{kind: recDelta, index: uint64(len(v.msgs) - 1), delta: raw}, next, enc, v.meta.Tally)
		if err != nil {
			return storage.DeltaResult{}, err
		}
		s.broker.Publish(e.id, storage.Event{Type: storage.EventDelta, Revision: m.Revision, Session: cloneMeta(m), Delta: applied})
		return storage.DeltaResultOf(m.Revision, next), nil
	})
}

// FinishMessage closes the session's open message with one durable
// journal record.
func (s *Store) FinishMessage(ctx context.Context, req storage.FinishRequest, limits storage.Limits) (storage.FinishResult, error) {
	return withLoaded(s, req.Ref, func(e *entry, v *view) (storage.FinishResult, error) {
		closed, cur, enc, tally, err := storage.CheckFinish(e.id, v.meta.Tally, v.meta.UpdatedAt, req, limits, e.stored(v))
		if err != nil {
			return storage.FinishResult{}, err
		}
		if closed == nil {
			return storage.FinishResult{Revision: v.meta.Revision, Message: cur}, nil
		}
		m, err := s.replaceLast(e, v, "finish a message of", record{kind: recClose, index: uint64(len(v.msgs) - 1), msgs: [][]byte{enc}}, closed, enc, tally)
		if err != nil {
			return storage.FinishResult{}, err
		}
		s.broker.Publish(e.id, storage.Event{Type: storage.EventFinished, Revision: m.Revision, Session: cloneMeta(m), Messages: []*sessiondv1.Message{closed}})
		return storage.FinishResult{Revision: m.Revision, Message: proto.Clone(closed).(*sessiondv1.Message), Closed: true}, nil
	})
}

// Streaming yields the sessions with an open message last changed before
// idleBefore, from the in-memory index (no file is read).
func (s *Store) Streaming(ctx context.Context, idleBefore time.Time, yield func(*storage.Session) error) error {
	return s.scanIndex(0, func(m *storage.Session) bool {
		return m.OpenMessageID != "" && m.UpdatedAt.Before(idleBefore)
	}, yield)
}

// stored finds a message of e (whose view is v) by id, for the rules.
func (e *entry) stored(v *view) storage.StoredFunc {
	return func(id string) (*sessiondv1.Message, bool, error) {
		i, ok := e.ids[id]
		if !ok || i >= len(v.msgs) {
			return nil, false, nil
		}
		if v.lastMsg != nil && i == len(v.msgs)-1 {
			// A copy shares the strings: no decoding, no copying the text.
			return proto.Clone(v.lastMsg).(*sessiondv1.Message), true, nil
		}
		m, err := unmarshalMessage(e.id, v.at(i))
		return m, err == nil, err
	}
}

// replaceLast writes rec (a change of e's last message, now msg and
// encoded enc, leaving the session's tally as tally) durably, and makes it
// e's state; msg is kept, and must not change. It
// returns the new metadata. Caller holds e.wmu and has loaded e.
//
// Views are shared with readers, so the new view cannot change the
// message list in place; nor does it copy it, which would make each delta
// cost as much as the session is long. It shares the list and holds the
// new last message beside it (view.last). The next append copies the list
// once, with the open message's final bytes in place.
func (s *Store) replaceLast(e *entry, v *view, what string, rec record, msg *sessiondv1.Message, enc []byte, tally storage.Tally) (*storage.Session, error) {
	s.beginWrite(e)
	m := cloneMeta(v.meta)
	m.Tally = tally
	m.Revision++
	m.UpdatedAt = now(v.meta.UpdatedAt)
	rec.rev, rec.updatedAt = m.Revision, m.UpdatedAt
	if err := s.writeJournal(e, encodeCommit([]record{rec}), 1); err != nil {
		return nil, fmt.Errorf("file: %s session %s: %w", what, e.id, err)
	}
	e.view.Store(&view{meta: m, msgs: v.msgs, last: enc, lastMsg: msg, size: v.size - int64(len(v.at(len(v.msgs)-1))) + int64(len(enc)), cs: v.cs})
	s.setMeta(e, m)
	s.touch(e)
	s.maybeFold(e)
	return m, nil
}

// at returns v's message i.
func (v *view) at(i int) []byte {
	if v.last != nil && i == len(v.msgs)-1 {
		return v.last
	}
	return v.msgs[i]
}

// span returns v's messages from up to to, for reading only: v.msgs
// itself unless the span ends with a replaced last message, then a copy.
func (v *view) span(from, to int) [][]byte {
	if v.last == nil || to < len(v.msgs) || from == to {
		return v.msgs[from:to]
	}
	out := make([][]byte, to-from)
	copy(out, v.msgs[from:to])
	out[len(out)-1] = v.last
	return out
}

// all returns every message of v, as span does.
func (v *view) all() [][]byte { return v.span(0, len(v.msgs)) }

// with returns a view of v's messages with other metadata and compactions.
func (v *view) with(meta *storage.Session, cs []storage.StoredCompaction) *view {
	c := *v
	c.meta, c.cs = meta, cs
	return &c
}

// replayDelta applies a delta record, as written, to the stored message b.
func replayDelta(id string, b, rawDelta []byte) ([]byte, error) {
	m := new(sessiondv1.Message)
	d := new(sessiondv1.MessageDelta)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("message of session %s under a delta: %v: %w", id, err, errCorrupt)
	}
	if err := proto.Unmarshal(rawDelta, d); err != nil {
		return nil, fmt.Errorf("delta of session %s: %v: %w", id, err, errCorrupt)
	}
	if d.GetOffset() != int64(len(m.GetContent())) || d.GetReasoningOffset() != int64(len(m.GetReasoning().GetText())) {
		return nil, fmt.Errorf("delta of session %s at offset %d/%d does not follow the message's %d/%d bytes: %w", id,
			d.GetOffset(), d.GetReasoningOffset(), len(m.GetContent()), len(m.GetReasoning().GetText()), errCorrupt)
	}
	m.Content += d.GetContent()
	if d.GetReasoning() != "" {
		if m.Reasoning == nil {
			m.Reasoning = &sessiondv1.Reasoning{}
		}
		m.Reasoning.Text += d.GetReasoning()
	}
	if d.GetUsage() != nil {
		m.Usage = d.GetUsage()
	}
	out, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("message of session %s under a delta: %v: %w", id, err, errCorrupt)
	}
	return out, nil
}

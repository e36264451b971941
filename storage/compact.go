package storage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Compaction is a stored compaction's range: a summary message stands for
// the session's first ThroughCount messages in the context view
// (LoadView ViewContext). The messages themselves are kept.
type Compaction struct {
	ThroughCount int64  // the range is the session's first ThroughCount messages
	ThroughID    string // the id of the range's last message
	Revision     uint64 // the revision the compaction made (a fork's copies keep the source's)
	CreatedAt    time.Time
	SummaryID    string // the summary message's id
}

// StoredCompaction is a compaction with its summary, as a Driver keeps it.
type StoredCompaction struct {
	Compaction
	Summary []byte // the summary message's protobuf encoding
}

// LoadView selects which messages a load returns.
type LoadView uint8

// The views of a session's messages.
const (
	// ViewFull is every stored message.
	ViewFull LoadView = iota
	// ViewContext is what to send a model: the latest compaction's summary,
	// then the messages after its range (every message without one).
	ViewContext
)

// CompactRequest stores a compaction of a session's messages up to and
// including ThroughMessageID.
type CompactRequest struct {
	Ref              Ref
	ThroughMessageID string
	Summary          *sessiondv1.Message
	ExpectedRevision uint64
}

// ContextMessageCount is how many messages s's context view holds.
func (s *Session) ContextMessageCount() int64 {
	if s.Compaction == nil {
		return s.MessageCount
	}
	return 1 + s.MessageCount - s.Compaction.ThroughCount
}

// ContextWindow is Window within the context view of a session of n
// messages whose latest compaction covers its first through (0: none).
// It returns whether the window starts with the summary (always false
// without a compaction) and the range [from, to) of stored messages that
// follows it.
func (o LoadOptions) ContextWindow(n, through int64) (summary bool, from, to int64) {
	if through <= 0 {
		from, to = o.Window(n)
		return false, from, to
	}
	vf, vt := o.Window(1 + n - through)
	if vf >= vt {
		return false, n, n
	}
	return vf == 0, through + max(vf, 1) - 1, through + vt - 1
}

// LatestCompaction returns the last of cs (the one the context view
// uses), or nil.
func LatestCompaction(cs []StoredCompaction) *Compaction {
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1].Compaction
	return &c
}

// KeepCompactions returns the compactions of cs whose range lies within a
// session's first count messages, in order: those a fork copying count
// messages keeps, and those a rewind to count leaves. It returns cs itself
// when every one is kept.
func KeepCompactions(cs []StoredCompaction, count int64) []StoredCompaction {
	for i, c := range cs {
		if c.ThroughCount > count {
			out := append([]StoredCompaction(nil), cs[:i]...)
			for _, c := range cs[i+1:] {
				if c.ThroughCount <= count {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return cs
}

// ThroughNotFound is the error of a compaction whose through_message_id
// is no message of the session.
func ThroughNotFound(sessionID, id string) error {
	return Invalid("through_message_id", "%q is not a message of session %s", msgcheck.Clip(id), sessionID)
}

// CheckCompact applies the compaction rules that need the stored session
// cur, where the message with the request's through id is at index
// through (ThroughNotFound when the session has none):
//
//   - a compaction the same as the latest (same range, and a summary the
//     same per SameMessage, which needs the client to have chosen its id)
//     is a no-op: it returns true and the Driver answers cur unchanged;
//   - otherwise CheckRevision, so a compaction computed from a stale read
//     is ErrConflict;
//   - the range may not end at the open message (ErrMessageState): a
//     summary cannot stand for text still being written;
//   - then the range may not separate a tool call from its result: after
//     holds the messages after the range, in order, and every tool call
//     made in the range must be answered in it (ErrInvalid naming
//     through_message_id).
//
// latestSummary is the latest compaction's summary; it is called only
// when the ranges match.
func CheckCompact(cur *Session, req CompactRequest, through int64, latestSummary func() (*sessiondv1.Message, error), after []*sessiondv1.Message) (noop bool, err error) {
	if l := cur.Compaction; l != nil && l.ThroughCount == through+1 && l.ThroughID == req.ThroughMessageID && req.Summary.GetId() == l.SummaryID {
		s, err := latestSummary()
		if err != nil {
			return false, err
		}
		if SameMessage(s, req.Summary) {
			return true, nil
		}
	}
	if err := CheckRevision(cur.ID, req.ExpectedRevision, cur.Revision); err != nil {
		return false, err
	}
	if cur.OpenMessageID != "" && cur.OpenMessageID == req.ThroughMessageID {
		return false, fmt.Errorf("through_message_id %q is open (MESSAGE_STATE_STREAMING): FinishMessage must close it before a summary can stand for it: %w", msgcheck.Clip(req.ThroughMessageID), ErrMessageState)
	}
	return false, checkBoundary(cur, req.ThroughMessageID, after)
}

// checkBoundary refuses a range that ends between a tool call and its
// result. A result after the range answers a call made in it unless a
// message after the range made that call; an open call not made after
// the range was made in it and has no result yet.
func checkBoundary(cur *Session, throughID string, after []*sessiondv1.Message) error {
	madeAfter := map[string]bool{}
	for _, m := range after {
		for _, c := range m.GetToolCalls() {
			madeAfter[c.GetId()] = true
		}
		if id := m.GetToolCallId(); m.GetRole() == sessiondv1.Role_ROLE_TOOL && id != "" {
			if !madeAfter[id] {
				return Invalid("through_message_id", "%q ends the range between tool call %q and its result, message %q; end it at or after the result", msgcheck.Clip(throughID), msgcheck.Clip(id), msgcheck.Clip(m.GetId()))
			}
			delete(madeAfter, id)
		}
	}
	for _, id := range cur.OpenToolCallIDs {
		if !madeAfter[id] {
			return Invalid("through_message_id", "%q ends a range holding tool call %q, which has no result yet; append its result first", msgcheck.Clip(throughID), msgcheck.Clip(id))
		}
	}
	return nil
}

// Compact stores a compaction (see CompactRequest): the summary stands
// for the session's messages up to and including ThroughMessageID in the
// context view, and the revision is bumped. Errors: ErrNotFound,
// ErrInvalid, ErrTooLarge, ErrConflict, ErrNoSpace, ErrDataLoss.
func (s *Store) Compact(ctx context.Context, req CompactRequest) (*Session, error) {
	return call(ctx, s, &req.Ref, func() (*Session, error) { return s.compact(ctx, req) })
}

func (s *Store) compact(ctx context.Context, req CompactRequest) (*Session, error) {
	if req.ThroughMessageID == "" {
		return nil, Invalid("through_message_id", "is empty; name the last message the summary stands for")
	}
	if err := ValidateMessageID("through_message_id", req.ThroughMessageID); err != nil {
		return nil, err
	}
	if req.Summary == nil {
		return nil, Invalid("summary", "is unset; a compaction needs the message that stands for its range")
	}
	if len(req.Summary.GetToolCalls()) > 0 {
		return nil, Invalid("summary.tool_calls", "is not empty; a summary makes no tool call")
	}
	if req.Summary.GetRole() == sessiondv1.Role_ROLE_TOOL && req.Summary.GetToolCallId() != "" {
		return nil, Invalid("summary.tool_call_id", "is set; a summary answers no tool call")
	}
	msgs, err := s.messages("summary", []*sessiondv1.Message{req.Summary}, false)
	if err != nil {
		return nil, unindexed("summary", err)
	}
	return s.d.Compact(ctx, req, msgs)
}

// unindexed renames field[0] to field in a *FieldError or *LimitError
// about a request's one message.
func unindexed(field string, err error) error {
	return renameField(err, func(f string) string {
		if rest, ok := strings.CutPrefix(f, field+"[0]"); ok {
			return field + rest
		}
		return f
	})
}

package storage

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Live turns: a message appended with MESSAGE_STATE_STREAMING is open; it
// is always its session's last message and a session holds at most one
// (Tally.OpenMessageID). AppendDelta adds text at a byte offset,
// FinishMessage closes it as COMPLETE, and InterruptIdle closes those whose
// writer went quiet as INTERRUPTED.
//
// Revisions: every delta that adds something is one change, bumping the
// revision and publishing one EventDelta, so that a watch resumes from any
// revision exactly, in the middle of a message too, with the broker and
// watch code every other change uses. A retried delta adds nothing and is
// a no-op like any retried write.

const (
	stateStreaming   = sessiondv1.MessageState_MESSAGE_STATE_STREAMING
	stateComplete    = sessiondv1.MessageState_MESSAGE_STATE_COMPLETE
	stateInterrupted = sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED
)

// DeltaRequest adds to a session's open message (AppendDelta).
type DeltaRequest struct {
	Ref Ref
	// Delta says which message, and what goes where: Content at Offset of
	// the content, Reasoning at ReasoningOffset of the reasoning text, and
	// Usage (when set) replaces the message's usage.
	Delta *sessiondv1.MessageDelta
}

// DeltaResult is the state after a delta (or a retried one).
type DeltaResult struct {
	Revision uint64
	// Length and ReasoningLength are the message's content and reasoning
	// text lengths in bytes: the offsets the next delta starts at.
	Length, ReasoningLength int64
}

// DeltaResultOf is the answer to a delta that left message m at revision
// rev.
func DeltaResultOf(rev uint64, m *sessiondv1.Message) DeltaResult {
	return DeltaResult{Revision: rev, Length: int64(len(m.GetContent())), ReasoningLength: int64(len(m.GetReasoning().GetText()))}
}

// FinishRequest closes a session's open message.
type FinishRequest struct {
	Ref       Ref
	MessageID string
	// State is MESSAGE_STATE_COMPLETE or MESSAGE_STATE_INTERRUPTED (a
	// writer's FinishMessage, or InterruptIdle).
	State sessiondv1.MessageState
	// The final fields of a COMPLETE message; when set they replace the
	// message's.
	ToolCalls []*sessiondv1.ToolCall
	Usage     *sessiondv1.Usage
	Model     string
	// IdleBefore, for InterruptIdle's interrupt, makes it a no-op unless
	// the session was last changed before this time: a delta that landed
	// since wins.
	IdleBefore time.Time
}

// FinishResult is the state after a finish.
type FinishResult struct {
	Revision uint64
	// Message is the message as stored.
	Message *sessiondv1.Message
	// Closed says whether this call closed it (false for a no-op).
	Closed bool
}

// LiveDriver is implemented by Drivers that store live turns. The Store
// refuses live turns (ErrUnsupported) on a Driver without it. Each method
// works under the session's write lock (or in its transaction), like
// Append, and publishes one event per change it makes.
type LiveDriver interface {
	// AppendDelta applies CheckDelta to the session's open message and
	// stores the result, bumping the revision once and publishing an
	// EventDelta carrying the applied delta; a no-op changes nothing.
	// Errors: ErrNotFound, ErrMessageState, ErrTooLarge, ErrNoSpace,
	// ErrDataLoss.
	AppendDelta(ctx context.Context, req DeltaRequest, limits Limits) (DeltaResult, error)

	// FinishMessage applies CheckFinish and stores the closed message in
	// place of the open one, with the tally CheckFinish returns, bumping
	// the revision once and publishing an EventFinished carrying it.
	// Errors: ErrNotFound, ErrMessageState, ErrInvalid, ErrTooLarge,
	// ErrNoSpace, ErrDataLoss.
	FinishMessage(ctx context.Context, req FinishRequest, limits Limits) (FinishResult, error)

	// Streaming yields the sessions, in any namespace and order, that
	// have an open message and were last changed before idleBefore,
	// without locks held while yield runs.
	Streaming(ctx context.Context, idleBefore time.Time, yield func(*Session) error) error
}

// CheckDelta applies AppendDelta's rule to the session sessionID, whose
// tally is tally and whose stored messages stored finds: the message must
// be the open one (ErrMessageState naming it); each text goes at its
// offset, where an offset past the end, or bytes that differ from those
// stored there, is ErrMessageState giving the current length; bytes
// already there are skipped (a retry), so only new ones are added. It
// returns the message after the delta, its encoding, and the delta as
// applied (offsets where the new bytes landed); next is nil when the
// delta adds nothing, and open is then the message as stored.
func CheckDelta(sessionID string, tally Tally, d *sessiondv1.MessageDelta, limits Limits, stored StoredFunc) (next, open *sessiondv1.Message, enc []byte, applied *sessiondv1.MessageDelta, err error) {
	id := d.GetMessageId()
	open, err = openMessage(sessionID, tally, id, stored)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	content, addC, err := splice("offset", open.GetContent(), d.GetOffset(), d.GetContent())
	if err != nil {
		return nil, open, nil, nil, err
	}
	reasoning, addR, err := splice("reasoning_offset", open.GetReasoning().GetText(), d.GetReasoningOffset(), d.GetReasoning())
	if err != nil {
		return nil, open, nil, nil, err
	}
	newUsage := d.GetUsage() != nil && !proto.Equal(d.GetUsage(), open.GetUsage())
	if addC == "" && addR == "" && !newUsage {
		return nil, open, nil, nil, nil
	}
	next = proto.Clone(open).(*sessiondv1.Message)
	next.Content = content
	applied = &sessiondv1.MessageDelta{MessageId: id, Offset: int64(len(open.GetContent())), Content: addC,
		ReasoningOffset: int64(len(open.GetReasoning().GetText()))}
	if addR != "" {
		if next.Reasoning == nil {
			next.Reasoning = &sessiondv1.Reasoning{}
		}
		next.Reasoning.Text = reasoning
		applied.Reasoning = addR
	}
	if newUsage {
		next.Usage = proto.Clone(d.GetUsage()).(*sessiondv1.Usage)
		applied.Usage = next.Usage
	}
	if enc, err = encodeWithin("content", next, limits); err != nil {
		return nil, open, nil, nil, err
	}
	return next, open, enc, applied, nil
}

// CheckFinish applies FinishMessage's rule, as CheckDelta does AppendDelta's,
// for a session last changed at updatedAt. It returns the closed message,
// its encoding and the session's tally once it is closed (Tally.Close,
// which applies the pairing rule to its tool calls). closed is nil for a
// no-op, and the message as stored is then in cur: a finish retried with
// the same fields after it landed, or an interrupt of a message that is no
// longer open or was written to since req.IdleBefore. Finishing a message
// that is not open otherwise is ErrMessageState naming it.
func CheckFinish(sessionID string, tally Tally, updatedAt time.Time, req FinishRequest, limits Limits, stored StoredFunc) (closed, cur *sessiondv1.Message, enc []byte, next Tally, err error) {
	if tally.OpenMessageID != req.MessageID {
		m, ok, err := stored(req.MessageID)
		if err != nil {
			return nil, nil, nil, tally, err
		}
		if ok && req.State == stateInterrupted {
			return nil, m, nil, tally, nil
		}
		if ok && m.GetState() == stateComplete {
			reopened := proto.Clone(m).(*sessiondv1.Message)
			reopened.State = stateStreaming
			if proto.Equal(closeMessage(reopened, req), m) {
				return nil, m, nil, tally, nil
			}
		}
	}
	open, err := openMessage(sessionID, tally, req.MessageID, stored)
	if err != nil {
		return nil, nil, nil, tally, err
	}
	if req.State == stateInterrupted && !req.IdleBefore.IsZero() && !updatedAt.Before(req.IdleBefore) {
		return nil, open, nil, tally, nil
	}
	closed = closeMessage(open, req)
	if next, err = tally.Close(closed); err != nil {
		return nil, nil, nil, tally, err
	}
	if enc, err = encodeWithin("message", closed, limits); err != nil {
		return nil, nil, nil, tally, err
	}
	return closed, open, enc, next, nil
}

// closeMessage returns open closed as req says.
func closeMessage(open *sessiondv1.Message, req FinishRequest) *sessiondv1.Message {
	c := proto.Clone(open).(*sessiondv1.Message)
	c.State = req.State
	if len(req.ToolCalls) > 0 {
		c.ToolCalls = req.ToolCalls
	}
	if req.Usage != nil {
		c.Usage = req.Usage
	}
	if req.Model != "" {
		c.Model = req.Model
	}
	return c
}

// openMessage returns the session's open message, which must have id.
func openMessage(sessionID string, tally Tally, id string, stored StoredFunc) (*sessiondv1.Message, error) {
	m, ok, err := stored(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("message %q is not in session %s: %w", msgcheck.Clip(id), sessionID, ErrMessageState)
	}
	if tally.OpenMessageID != id || m.GetState() != stateStreaming {
		state := m.GetState()
		if state == sessiondv1.MessageState_MESSAGE_STATE_UNSPECIFIED {
			state = stateComplete
		}
		return nil, fmt.Errorf("message %q of session %s is not open: it is %s: %w", msgcheck.Clip(id), sessionID, state, ErrMessageState)
	}
	return m, nil
}

// splice returns cur with add at byte off, and the part of add that was
// new; the bytes add shares with cur from off must be equal.
func splice(field, cur string, off int64, add string) (string, string, error) {
	n := int64(len(cur))
	if off > n {
		return "", "", fmt.Errorf("%s %d is past the end of the message's %d bytes; send the delta at %d: %w", field, off, n, n, ErrMessageState)
	}
	overlap := min(n-off, int64(len(add)))
	if cur[off:off+overlap] != add[:overlap] {
		return "", "", fmt.Errorf("%s %d: the bytes sent differ from those stored there; the message holds %d bytes: %w", field, off, n, ErrMessageState)
	}
	rest := add[overlap:]
	if rest == "" {
		return cur, "", nil
	}
	return cur + rest, rest, nil
}

// encodeWithin encodes m, which must fit max_message_bytes (field names
// the request's part that made it grow).
func encodeWithin(field string, m *sessiondv1.Message, limits Limits) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode message %q: %w", msgcheck.Clip(m.GetId()), err)
	}
	if n := int64(len(b)); n > limits.MaxMessageBytes {
		return nil, &LimitError{Field: field, Limit: "max_message_bytes", Size: n, Max: limits.MaxMessageBytes}
	}
	return b, nil
}

// Close returns the tally once its open message is closed as closed: from
// then on its tool calls, usage and model count, with the pairing rule
// (ErrInvalid naming tool_calls[j].id).
func (t Tally) Close(closed *sessiondv1.Message) (Tally, error) {
	t.OpenMessageID = ""
	out, err := t.add("message", []*sessiondv1.Message{closed}, true)
	if fe, ok := err.(*FieldError); ok {
		c := *fe
		if len(c.Field) > len("message[0].") && c.Field[:len("message[0].")] == "message[0]." {
			c.Field = c.Field[len("message[0]."):]
		}
		return t, &c
	}
	return out, err
}

// CloseStored is Close for a close already stored (a backend replaying
// its journal): it never fails, as AddStored.
func (t Tally) CloseStored(closed *sessiondv1.Message) Tally {
	t.OpenMessageID = ""
	return t.AddStored([]*sessiondv1.Message{closed})
}

// checkDelta validates an AppendDelta request.
func (s *Store) checkDelta(d *sessiondv1.MessageDelta) error {
	if d == nil {
		return Invalid("delta", "is null")
	}
	if err := ValidateMessageID("message_id", d.GetMessageId()); err != nil {
		return err
	}
	if err := firstErr(notNegative("offset", d.GetOffset()), notNegative("reasoning_offset", d.GetReasoningOffset())); err != nil {
		return err
	}
	if !utf8.ValidString(d.GetContent()) {
		return Invalid("content", "is not valid UTF-8")
	}
	if !utf8.ValidString(d.GetReasoning()) {
		return Invalid("reasoning", "is not valid UTF-8")
	}
	if d.GetContent() == "" && d.GetReasoning() == "" && d.GetUsage() == nil {
		return Invalid("content", "is empty, as are reasoning and usage; a delta adds at least one of them")
	}
	if n := int64(len(d.GetContent()) + len(d.GetReasoning())); n > s.lim.MaxMessageBytes {
		return &LimitError{Field: "content", Limit: "max_message_bytes", Size: n, Max: s.lim.MaxMessageBytes}
	}
	return checkUsage("usage", d.GetUsage())
}

// checkUsage refuses negative token counts, as msgcheck does in a message.
func checkUsage(field string, u *sessiondv1.Usage) error {
	if u == nil {
		return nil
	}
	if f := msgcheck.Fields("", &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Usage: u}); f != nil {
		return Invalid(field+f.Field[len(".usage"):], "%s", f.Description)
	}
	return nil
}

// live returns the Driver as a LiveDriver, or ErrUnsupported.
func (s *Store) live() (LiveDriver, error) {
	if ld, ok := s.d.(LiveDriver); ok {
		return ld, nil
	}
	return nil, fmt.Errorf("live turns (open messages, AppendDelta, FinishMessage): %w", ErrUnsupported)
}

// AppendDelta adds to a session's open message (see DeltaRequest and
// CheckDelta); when it returns nil the delta is durable. Errors:
// ErrNotFound, ErrInvalid, ErrMessageState, ErrTooLarge, ErrUnsupported,
// ErrNoSpace, ErrDataLoss.
func (s *Store) AppendDelta(ctx context.Context, req DeltaRequest) (DeltaResult, error) {
	return call(ctx, s, &req.Ref, func() (DeltaResult, error) {
		ld, err := s.live()
		if err != nil {
			return DeltaResult{}, err
		}
		if err := s.checkDelta(req.Delta); err != nil {
			return DeltaResult{}, err
		}
		return ld.AppendDelta(ctx, req, s.lim)
	})
}

// FinishMessage closes a session's open message as COMPLETE (also when
// req.State is unset) or INTERRUPTED, with the final fields req sets (see
// CheckFinish). Errors: ErrNotFound,
// ErrInvalid, ErrMessageState, ErrTooLarge, ErrUnsupported, ErrNoSpace,
// ErrDataLoss.
func (s *Store) FinishMessage(ctx context.Context, req FinishRequest) (FinishResult, error) {
	return call(ctx, s, &req.Ref, func() (FinishResult, error) { return s.finishMessage(ctx, req) })
}

func (s *Store) finishMessage(ctx context.Context, req FinishRequest) (FinishResult, error) {
	ld, err := s.live()
	if err != nil {
		return FinishResult{}, err
	}
	if err := ValidateMessageID("message_id", req.MessageID); err != nil {
		return FinishResult{}, err
	}
	// The final fields follow the rules of a message's.
	probe := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: req.ToolCalls, Usage: req.Usage, Model: req.Model}
	if f := msgcheck.Message("", probe); f != nil {
		return FinishResult{}, Invalid(f.Field[1:], "%s", f.Description)
	}
	switch req.State {
	case sessiondv1.MessageState_MESSAGE_STATE_UNSPECIFIED:
		req.State = stateComplete
	case stateComplete, stateInterrupted:
	default:
		return FinishResult{}, Invalid("state", "is %s; a message ends MESSAGE_STATE_COMPLETE or MESSAGE_STATE_INTERRUPTED", req.State)
	}
	req.IdleBefore = time.Time{}
	return ld.FinishMessage(ctx, req, s.lim)
}

// InterruptIdle closes as MESSAGE_STATE_INTERRUPTED every open message
// whose session has not changed since idleBefore, keeping its text; its
// tool calls stay open, so a load with CloseOpenToolCalls answers them.
// It returns how many it closed. A Driver without live turns has none.
func (s *Store) InterruptIdle(ctx context.Context, idleBefore time.Time) (int, error) {
	return call(ctx, s, nil, func() (int, error) { return s.interruptIdle(ctx, idleBefore) })
}

func (s *Store) interruptIdle(ctx context.Context, idleBefore time.Time) (int, error) {
	ld, ok := s.d.(LiveDriver)
	if !ok {
		return 0, nil
	}
	var idle []*Session
	if err := ld.Streaming(ctx, idleBefore, func(se *Session) error {
		idle = append(idle, se)
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, se := range idle {
		res, err := ld.FinishMessage(ctx, FinishRequest{
			Ref:       Ref{Namespace: se.Namespace, ID: se.ID},
			MessageID: se.OpenMessageID, State: stateInterrupted, IdleBefore: idleBefore,
		}, s.lim)
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			continue // deleted or damaged meanwhile: nothing to close
		}
		if res.Closed {
			n++
		}
	}
	return n, nil
}

// refuseOpenUnlessLive refuses open messages on a Driver without live turns.
func (s *Store) refuseOpenUnlessLive(field string, msgs []*sessiondv1.Message) error {
	if _, ok := s.d.(LiveDriver); ok {
		return nil
	}
	for i, m := range msgs {
		if m.GetState() == stateStreaming {
			return fmt.Errorf("%s[%d].state: open messages: %w", field, i, ErrUnsupported)
		}
	}
	return nil
}

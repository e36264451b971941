package client

import (
	"context"
	"errors"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Turn is a live turn: an open assistant message (MESSAGE_STATE_STREAMING)
// that a model's answer is written into as it streams, each piece stored
// durably when Write returns, so that a crash of the program, or of the
// daemon, loses nothing acknowledged and any client can follow the turn by
// watching the session. Finish closes it; if the program dies first, the
// daemon closes it as MESSAGE_STATE_INTERRUPTED after its
// --stream-idle-timeout, keeping the text. A Turn is safe for concurrent
// use; writes are applied in the order they are made.
//
// Every write is safe to retry after ErrUnavailable or a timeout: deltas
// carry their byte offset, so one that landed is not added twice.
type Turn struct {
	c   *Client
	ref *sessiondv1.SessionRef
	id  string

	// step, for a Handle's turn (StreamTurn), keeps the handle in step
	// after each write: the revision, and the finished message or the
	// finish's error. It is called with mu held, in write order.
	step func(rev uint64, finished *sessiondv1.Message, finishErr error)

	mu              sync.Mutex // guards below, and orders writes
	length          int64      // content bytes stored: the next offset
	reasoningLength int64
	revision        uint64
}

// OpenTurn appends m to the session as an open message and returns its
// Turn. m is copied; it gets MESSAGE_STATE_STREAMING, ROLE_ASSISTANT when
// it names no role, and an id when it has none. A session holds one open
// message at a time, as its last: appends wait until it is finished
// (ErrConflict).
func (c *Client) OpenTurn(ctx context.Context, r Ref, m *sessiondv1.Message) (*Turn, error) {
	t, _, err := c.openTurn(ctx, r, m, 0)
	return t, err
}

// openTurn is OpenTurn guarded by expectedRevision (0: none); it returns the
// open message too.
func (c *Client) openTurn(ctx context.Context, r Ref, m *sessiondv1.Message, expectedRevision uint64) (*Turn, *sessiondv1.Message, error) {
	m = proto.CloneOf(m)
	if m.Role == sessiondv1.Role_ROLE_UNSPECIFIED {
		m.Role = sessiondv1.Role_ROLE_ASSISTANT
	}
	if m.Id == "" {
		m.Id = newID()
	}
	m.State = sessiondv1.MessageState_MESSAGE_STATE_STREAMING
	ref := c.ref(r)
	res, err := c.append(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{m},
		ExpectedRevision: expectedRevision})
	if err != nil {
		return nil, nil, err
	}
	return &Turn{c: c, ref: ref, id: m.Id, length: int64(len(m.Content)),
		reasoningLength: int64(len(m.GetReasoning().GetText())), revision: res.Revision}, m, nil
}

// ResumeTurn returns the Turn of the session's open message messageID, as
// far as it is stored: a program that restarted carries on where the daemon
// has it. A message that is not open (finished, or interrupted by the
// daemon) is ErrMessageState.
func (c *Client) ResumeTurn(ctx context.Context, r Ref, messageID string) (*Turn, error) {
	sess, msgs, err := c.Load(ctx, r, LoadOptions{Tail: true, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || msgs[0].GetId() != messageID || msgs[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		return nil, errorf("client: resume turn: message %q is not the session's open message: %w", messageID, ErrMessageState)
	}
	m := msgs[0]
	return &Turn{c: c, ref: c.ref(r), id: messageID, length: int64(len(m.GetContent())),
		reasoningLength: int64(len(m.GetReasoning().GetText())), revision: sess.Revision}, nil
}

// ID returns the open message's id.
func (t *Turn) ID() string { return t.id }

// Len returns how many bytes of content are stored.
func (t *Turn) Len() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.length
}

// Revision returns the session's revision after the turn's last write.
func (t *Turn) Revision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.revision
}

// Write adds text to the message's content, durably.
func (t *Turn) Write(ctx context.Context, text string) error {
	return t.delta(ctx, &sessiondv1.AppendDeltaRequest{Content: text})
}

// WriteReasoning adds text to the message's reasoning, durably.
func (t *Turn) WriteReasoning(ctx context.Context, text string) error {
	return t.delta(ctx, &sessiondv1.AppendDeltaRequest{Reasoning: text})
}

// SetUsage stores the usage so far.
func (t *Turn) SetUsage(ctx context.Context, u *sessiondv1.Usage) error {
	return t.delta(ctx, &sessiondv1.AppendDeltaRequest{Usage: u})
}

func (t *Turn) delta(ctx context.Context, req *sessiondv1.AppendDeltaRequest) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	req.Ref, req.MessageId, req.Offset, req.ReasoningOffset = t.ref, t.id, t.length, t.reasoningLength
	resp, err := unary(ctx, t.c, rpcDelta, t.c.conn.rpc.AppendDelta, req)
	if err != nil {
		return err
	}
	t.length, t.reasoningLength, t.revision = resp.GetLength(), resp.GetReasoningLength(), resp.GetRevision()
	if t.step != nil {
		t.step(t.revision, nil, nil)
	}
	return nil
}

// FinishOptions are a turn's final fields; those set replace the message's.
type FinishOptions struct {
	ToolCalls []*sessiondv1.ToolCall
	Usage     *sessiondv1.Usage
	Model     string
	// Interrupted closes the message as MESSAGE_STATE_INTERRUPTED: the
	// answer was cut short (a user's Ctrl-C, a model stream that failed).
	Interrupted bool
}

// Finish closes the message as MESSAGE_STATE_COMPLETE (or INTERRUPTED,
// see FinishOptions) and returns it as stored. A retry after it landed,
// with the same options, succeeds.
func (t *Turn) Finish(ctx context.Context, o FinishOptions) (*sessiondv1.Message, error) {
	if err := t.c.check(rpcFinish); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	state := sessiondv1.MessageState_MESSAGE_STATE_COMPLETE
	if o.Interrupted {
		state = sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED
	}
	resp, err := t.c.conn.rpc.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: t.ref, MessageId: t.id,
		ToolCalls: o.ToolCalls, Usage: o.Usage, Model: o.Model, State: state})
	if err != nil {
		err = mapError(ctx, rpcFinish, err)
		if t.step != nil {
			t.step(0, nil, err)
		}
		return nil, err
	}
	t.revision = resp.GetRevision()
	if t.step != nil {
		t.step(t.revision, resp.GetMessage(), nil)
	}
	return resp.GetMessage(), nil
}

// StreamTurn saves what is pending, then opens a live turn in the handle's
// session (m as for Client.OpenTurn), guarded by the revision the handle
// holds: a session another writer changed since is ErrConflict. The open
// message joins Messages at once, as stored; each write keeps the handle's
// revision in step, and Finish replaces the message with the finished one.
// While the turn is open (until Finish, or a Finish that finds the message
// no longer open), Append is ErrMessageState and so is a second StreamTurn.
//
// If the program stops before Finish, the daemon closes the message as
// MESSAGE_STATE_INTERRUPTED after its --stream-idle-timeout, keeping the
// text written, and the next Open of the session loads it so.
func (h *Handle) StreamTurn(ctx context.Context, m *sessiondv1.Message) (*Turn, error) {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, errorf("client: stream turn: %w", ErrClosed)
	case h.turn != "":
		h.mu.Unlock()
		return nil, errorf("client: stream turn: a live turn is open: %w", ErrMessageState)
	}
	// Holding the turn's place refuses Appends from here on, so the save
	// below leaves nothing unsaved to come after the open message.
	h.turn = "opening"
	h.mu.Unlock()
	t, opened, err := h.openTurn(ctx, m)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.turn = ""
		return nil, err
	}
	h.turn = t.id
	h.entries = append(h.entries, entry{m: opened})
	h.ids[t.id] = struct{}{}
	h.synced = len(h.entries)
	h.revision = t.revision
	t.step = func(rev uint64, finished *sessiondv1.Message, finishErr error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.turn != t.id {
			return // a Reload found the message closed
		}
		if finishErr != nil {
			if errors.Is(finishErr, ErrMessageState) {
				h.turn = "" // no longer open: Reload shows how the daemon closed it
			}
			return
		}
		h.revision = rev
		if finished != nil {
			h.turn = ""
			if i := slices.IndexFunc(h.entries, func(e entry) bool { return e.m.GetId() == t.id }); i >= 0 {
				h.entries[i] = entry{m: finished}
			}
		}
	}
	return t, nil
}

// openTurn saves what is pending and opens the turn. saveMu must be held.
func (h *Handle) openTurn(ctx context.Context, m *sessiondv1.Message) (*Turn, *sessiondv1.Message, error) {
	if err := h.saveLocked(ctx, false); err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	rev := h.revision
	h.mu.Unlock()
	t, opened, err := h.c.openTurn(ctx, ID(h.id), m, rev)
	if err != nil {
		return nil, nil, errorf("stream turn in %s: %w", h.id, err)
	}
	return t, opened, nil
}

package client

import (
	"context"
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
	m = proto.CloneOf(m)
	if m.Role == sessiondv1.Role_ROLE_UNSPECIFIED {
		m.Role = sessiondv1.Role_ROLE_ASSISTANT
	}
	if m.Id == "" {
		m.Id = newID()
	}
	m.State = sessiondv1.MessageState_MESSAGE_STATE_STREAMING
	ref := c.ref(r)
	res, err := c.append(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{m}})
	if err != nil {
		return nil, err
	}
	return &Turn{c: c, ref: ref, id: m.Id, length: int64(len(m.Content)),
		reasoningLength: int64(len(m.GetReasoning().GetText())), revision: res.Revision}, nil
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
	if err := t.c.check(rpcDelta); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	req.Ref, req.MessageId, req.Offset, req.ReasoningOffset = t.ref, t.id, t.length, t.reasoningLength
	resp, err := t.c.conn.rpc.AppendDelta(ctx, req)
	if err != nil {
		return mapError(ctx, rpcDelta, err)
	}
	t.length, t.reasoningLength, t.revision = resp.GetLength(), resp.GetReasoningLength(), resp.GetRevision()
	return nil
}

// FinishOptions are a turn's final fields; those set replace the message's.
type FinishOptions struct {
	ToolCalls []*sessiondv1.ToolCall
	Usage     *sessiondv1.Usage
	Model     string
}

// Finish closes the message as MESSAGE_STATE_COMPLETE and returns it as
// stored. A retry after it landed, with the same options, succeeds.
func (t *Turn) Finish(ctx context.Context, o FinishOptions) (*sessiondv1.Message, error) {
	if err := t.c.check(rpcFinish); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	resp, err := t.c.conn.rpc.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: t.ref, MessageId: t.id,
		ToolCalls: o.ToolCalls, Usage: o.Usage, Model: o.Model})
	if err != nil {
		return nil, mapError(ctx, rpcFinish, err)
	}
	t.revision = resp.GetRevision()
	return resp.GetMessage(), nil
}

package client

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Compact stores a compaction: summary (typically a system or user message
// holding the summary text) stands for the session's messages up to and
// including throughMessageID in the context view (LoadOptions.View
// ViewContext); every message is kept. With expectedRevision non-zero, a
// session changed since (ErrConflict) is not compacted, so that a summary
// computed from a stale read never hides newer messages. A range that
// separates a tool call from its result is ErrInvalid.
func (c *Client) Compact(ctx context.Context, r Ref, throughMessageID string, summary *sessiondv1.Message, expectedRevision uint64) (*Session, error) {
	return sessionCall(ctx, c, rpcCompact, c.conn.rpc.CompactSession, &sessiondv1.CompactSessionRequest{
		Ref: c.ref(r), ThroughMessageId: throughMessageID, Summary: summary, ExpectedRevision: expectedRevision,
	})
}

// Compact saves what is pending, then stores a compaction of the session
// (see Client.Compact) at the revision the handle holds: a session changed
// by someone else since the handle last synced is ErrConflict (Reload,
// then summarise again). The handle's messages stay whole; ContextMessages
// loads what a model should see.
func (h *Handle) Compact(ctx context.Context, throughMessageID string, summary *sessiondv1.Message) error {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if err := h.saveLocked(ctx, false); err != nil {
		return err
	}
	sess, err := h.c.Compact(ctx, ID(h.id), throughMessageID, summary, h.Revision())
	if err != nil {
		return errorf("compact %s: %w", h.id, err)
	}
	h.mu.Lock()
	h.revision = sess.Revision
	h.mu.Unlock()
	return nil
}

// ContextMessages saves what is pending, then loads the session's context
// view: the latest compaction's summary and the messages after its range
// (every message without a compaction), with a synthetic result closing
// each open tool call, as a model API wants them.
func (h *Handle) ContextMessages(ctx context.Context) ([]*sessiondv1.Message, error) {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if err := h.saveLocked(ctx, false); err != nil {
		return nil, err
	}
	_, msgs, err := h.c.Load(ctx, ID(h.id), LoadOptions{View: ViewContext, CloseOpenToolCalls: true})
	if err != nil {
		return nil, errorf("load the context of %s: %w", h.id, err)
	}
	return msgs, nil
}

package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// DefaultAutoSaveInterval is the auto-save period of WithAutoSave(0).
const DefaultAutoSaveInterval = 5 * time.Minute

// DefaultCloseTimeout bounds Close's retries when its ctx has no deadline.
const DefaultCloseTimeout = 30 * time.Second

// Retry tuning for auto-save and Close. An auto-save round tries a few times
// and then reports; the next round (the next tick or idle timeout) tries
// again, so a daemon that stays down is reported every round, never retried
// silently.
const (
	autoSaveAttempts   uint = 5
	autoSaveAttemptTTL      = 30 * time.Second
	backoffBase             = 100 * time.Millisecond
	backoffMax              = 2 * time.Second
)

type handleOptions struct {
	autoSave     time.Duration
	idleSave     time.Duration
	onError      func(error)
	noSystem     bool
	closeTimeout time.Duration
	alias, title string
	labels, md   map[string]string
	spoolDir     string
}

// HandleOption configures a Handle.
type HandleOption func(*handleOptions)

// WithAutoSave saves the handle every interval (DefaultAutoSaveInterval when
// interval <= 0) on its own goroutine, when it has something unsaved.
func WithAutoSave(interval time.Duration) HandleOption {
	return func(o *handleOptions) {
		if interval <= 0 {
			interval = DefaultAutoSaveInterval
		}
		o.autoSave = interval
	}
}

// WithIdleSave saves the handle once d has passed without an Append (or
// another change), on the auto-save goroutine. It works with or without
// WithAutoSave.
func WithIdleSave(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.idleSave = d }
}

// WithErrorHandler receives the failures of auto-save (on the auto-save
// goroutine; it must not block for long, and must not call Close, which
// waits for that goroutine). Without it they are logged through the Client's
// logger.
func WithErrorHandler(f func(error)) HandleOption {
	return func(o *handleOptions) { o.onError = f }
}

// WithoutSystemMessages keeps ROLE_SYSTEM messages appended to the handle
// local: they are in Messages but never saved, and Rewind counts do not
// include them.
func WithoutSystemMessages() HandleOption {
	return func(o *handleOptions) { o.noSystem = true }
}

// WithCloseTimeout bounds Close's retries when the ctx given to Close has no
// deadline (default DefaultCloseTimeout).
func WithCloseTimeout(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.closeTimeout = d }
}

// WithSpool keeps the handle's unsaved changes in a spool file in dir
// (created 0700 if missing); see the package documentation, "Spooling".
// Append and the Set* methods fail with ErrSpool, changing nothing, if the
// file cannot be written. The next Open of the session with the same dir
// sends what was spooled before it returns; if that save fails, Open fails
// and the messages stay spooled. A damaged file is renamed to
// "<file>.damaged" and Open fails with ErrSpool naming it.
func WithSpool(dir string) HandleOption {
	return func(o *handleOptions) { o.spoolDir = dir }
}

// WithAlias gives a session that New creates an alias.
func WithAlias(alias string) HandleOption {
	return func(o *handleOptions) { o.alias = alias }
}

// WithTitle gives a session that New or OpenOrCreate creates a title.
func WithTitle(title string) HandleOption {
	return func(o *handleOptions) { o.title = title }
}

// WithLabels gives a session that New or OpenOrCreate creates labels.
func WithLabels(labels map[string]string) HandleOption {
	return func(o *handleOptions) { o.labels = labels }
}

// WithSessionMetadata gives a session that New or OpenOrCreate creates
// metadata.
func WithSessionMetadata(md map[string]string) HandleOption {
	return func(o *handleOptions) { o.md = md }
}

// entry is one message of a handle.
type entry struct {
	m *sessiondv1.Message
	// local marks a message the handle never saves: a system message that
	// WithoutSystemMessages keeps out of the store, or a synthetic tool
	// result a resume loaded for a call left open (msgcheck.IsSynthetic).
	local bool
}

// Handle is an open session: messages appended to it live in memory until a
// save (explicit, automatic, or in Close) sends what is new. Every method is
// safe for concurrent use.
type Handle struct {
	c    *Client // in the handle's namespace
	opts handleOptions
	base []HandleOption // the options it was opened with, for Fork
	kick chan struct{}  // Append and Set* wake the idle timer

	// closeMu serialises Close calls and the auto-save goroutine's start and
	// stop.
	closeMu  sync.Mutex
	loopStop context.CancelFunc
	loopDone chan struct{}

	// saveMu serialises the handle's RPC sequences (saves, Reload, Rewind,
	// Fork, StreamTurn) so that the stored prefix and the revision change
	// in one order. It is taken before mu, never after.
	saveMu sync.Mutex
	// appended: the handle has sent an append, so later ones go over the
	// connection's AppendStream, which a handle that writes once never opens.
	appended bool
	// resend is the size of the last append that failed: its outcome is
	// unknown, so the next append sends exactly those messages again (a
	// no-op for the daemon if they landed) before any appended since, which
	// a stale expected revision would otherwise make a conflict.
	resend int

	mu           sync.Mutex // guards everything below
	id           string
	alias        string
	title        string
	titleDerived bool // title came from the first user message
	summary      string
	metadata     map[string]string
	revision     uint64
	entries      []entry
	ids          map[string]struct{} // ids of entries, to refuse a repeated one
	// synced: entries[:synced] are stored (or local). Saves send the rest.
	synced int
	// summaryDirty and metadataDirty say what UpdateSession must send.
	summaryDirty, metadataDirty bool
	// paused holds the final error that stopped auto-save (a conflict, a
	// refusal); a successful Save or Reload clears it.
	paused error
	closed bool
	// turn is the id of the open message of a StreamTurn ("opening" while
	// StreamTurn opens it), or "". Appends wait for it.
	turn string
	// spoolPath is this handle's spool file (WithSpool), or ""; spooled
	// says it exists.
	spoolPath string
	spooled   bool
}

// Open opens an existing session by id or alias, loading its messages. A
// missing session is ErrNotFound.
//
// Each tool call left open is followed by a synthetic result saying it was
// interrupted (package documentation, "Tool calls left open"): a local
// entry that Messages shows, saves never send and counts (Rewind, Fork)
// leave out. A live turn left open (StreamTurn) is loaded as the daemon has
// it: MESSAGE_STATE_INTERRUPTED once its idle sweep closed it.
func (c *Client) Open(ctx context.Context, r Ref, opts ...HandleOption) (*Handle, error) {
	hc := c.In(r.namespace(c.namespace))
	sess, msgs, err := hc.Load(ctx, r, LoadOptions{CloseOpenToolCalls: true})
	if err != nil {
		return nil, err
	}
	h := newHandle(hc, sess, withLocals(msgs, nil), opts)
	if h.spoolPath != "" {
		if err := h.replaySpools(ctx); err != nil {
			h.closeMu.Lock()
			h.stopLoop()
			h.closeMu.Unlock()
			return nil, err
		}
	}
	return h, nil
}

// OpenOrCreate opens the session r names, creating it (with r's alias or id,
// and the WithTitle, WithLabels and WithSessionMetadata options) when it
// does not exist yet.
func (c *Client) OpenOrCreate(ctx context.Context, r Ref, opts ...HandleOption) (*Handle, error) {
	hc := c.In(r.namespace(c.namespace))
	h, err := hc.Open(ctx, r, opts...)
	if !errors.Is(err, ErrNotFound) {
		return h, err
	}
	o := applyOptions(opts)
	co := CreateOptions{ID: r.id, Alias: r.alias, Title: o.title, Labels: o.labels, Metadata: o.md}
	if co.ID == "" {
		co.ID = newID()
	}
	sess, err := hc.Create(ctx, co)
	if errors.Is(err, ErrAliasInUse) && r.alias != "" {
		// Another client created it between our load and our create.
		return hc.Open(ctx, r, opts...)
	}
	if err != nil {
		return nil, err
	}
	return newHandle(hc, sess, nil, opts), nil
}

// New creates a session (with the WithAlias, WithTitle, WithLabels and
// WithSessionMetadata options) and opens it.
func (c *Client) New(ctx context.Context, opts ...HandleOption) (*Handle, error) {
	o := applyOptions(opts)
	sess, err := c.Create(ctx, CreateOptions{ID: newID(), Alias: o.alias, Title: o.title, Labels: o.labels, Metadata: o.md})
	if err != nil {
		return nil, err
	}
	return newHandle(c, sess, nil, opts), nil
}

func applyOptions(opts []HandleOption) handleOptions {
	var o handleOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.closeTimeout <= 0 {
		o.closeTimeout = DefaultCloseTimeout
	}
	return o
}

// newID returns a new UUIDv7 (time-ordered, like the server's own ids).
func newID() string {
	if u, err := uuid.NewV7(); err == nil {
		return u.String()
	}
	return uuid.NewString()
}

// withLocals returns the entries of loaded, a load's messages (its
// synthetic results marked local), with the handle's own local entries
// among prior (system messages kept out of the store) put back where they
// were: after as many stored messages as came before them. prior's
// synthetic results are dropped; the load made fresh ones.
func withLocals(loaded []*sessiondv1.Message, prior []entry) []entry {
	type localAt struct {
		e     entry
		after int
	}
	var locals []localAt
	n := 0
	for _, e := range prior {
		switch {
		case !e.local:
			n++
		case !msgcheck.IsSynthetic(e.m):
			locals = append(locals, localAt{e, n})
		}
	}
	out := make([]entry, 0, len(loaded)+len(locals))
	n = 0
	for _, m := range loaded {
		for len(locals) > 0 && locals[0].after <= n {
			out, locals = append(out, locals[0].e), locals[1:]
		}
		synthetic := msgcheck.IsSynthetic(m)
		out = append(out, entry{m: m, local: synthetic})
		if !synthetic {
			n++
		}
	}
	for _, l := range locals {
		out = append(out, l.e)
	}
	return out
}

// firstStored returns the prefix of entries before their (keep+1)-th
// stored message: the first keep stored messages and the local entries
// among and right after them. keep < 0 returns entries.
func firstStored(entries []entry, keep int64) []entry {
	if keep < 0 {
		return entries
	}
	var n int64
	for i, e := range entries {
		if !e.local {
			if n == keep {
				return entries[:i]
			}
			n++
		}
	}
	return entries
}

func newHandle(c *Client, sess *Session, entries []entry, opts []HandleOption) *Handle {
	h := &Handle{
		c:            c,
		opts:         applyOptions(opts),
		base:         slices.Clone(opts),
		kick:         make(chan struct{}, 1),
		id:           sess.ID,
		alias:        sess.Alias,
		title:        sess.Title,
		titleDerived: sess.TitleDerived,
		summary:      sess.Summary,
		metadata:     sess.Metadata,
		revision:     sess.Revision,
	}
	h.setEntriesLocked(entries, len(entries))
	if h.opts.spoolDir != "" {
		h.spoolPath = filepath.Join(h.opts.spoolDir, spoolPrefix(c.namespace, h.id)+newID()+spoolExt)
	}
	h.closeMu.Lock()
	h.startLoop()
	h.closeMu.Unlock()
	return h
}

// setEntriesLocked replaces the handle's entries, of which the first synced
// are stored (or local). Called with mu held, or before the handle is shared.
func (h *Handle) setEntriesLocked(entries []entry, synced int) {
	h.entries, h.synced = entries, synced
	h.ids = make(map[string]struct{}, len(entries))
	for _, e := range entries {
		h.ids[e.m.GetId()] = struct{}{}
	}
}

// ID returns the session's id: what resumes it.
func (h *Handle) ID() string { return h.id }

// Namespace returns the session's namespace.
func (h *Handle) Namespace() string { return h.c.namespace }

// locked returns f's result, computed with h.mu held.
func locked[T any](h *Handle, f func() T) T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f()
}

// Alias returns the session's alias as last seen, or "".
func (h *Handle) Alias() string { return locked(h, func() string { return h.alias }) }

// Title returns the session's title as last seen.
func (h *Handle) Title() string { return locked(h, func() string { return h.title }) }

// Summary returns the handle's summary.
func (h *Handle) Summary() string { return locked(h, func() string { return h.summary }) }

// Metadata returns a copy of the handle's session metadata.
func (h *Handle) Metadata() map[string]string {
	return locked(h, func() map[string]string { return maps.Clone(h.metadata) })
}

// Revision returns the session's revision as of the handle's last exchange
// with the daemon.
func (h *Handle) Revision() uint64 { return locked(h, func() uint64 { return h.revision }) }

// Messages returns a copy of the handle's messages: stored ones, then unsaved
// ones, including local system messages.
func (h *Handle) Messages() []*sessiondv1.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*sessiondv1.Message, len(h.entries))
	for i, e := range h.entries {
		out[i] = proto.CloneOf(e.m)
	}
	return out
}

// OpenToolCalls returns the ids of the tool calls the session's assistant
// messages made (stored or not yet saved) that no ROLE_TOOL message
// answers, in the order they were made: the calls the program may still
// answer. A synthetic result (see Open) answers nothing.
func (h *Handle) OpenToolCalls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	open, _ := msgcheck.OpenCalls(nil, "", savedOf(h.entries), false)
	return open
}

// savedOf returns the messages of entries that saves send: all but the
// local ones.
func savedOf(entries []entry) []*sessiondv1.Message {
	out := make([]*sessiondv1.Message, 0, len(entries))
	for _, e := range entries {
		if !e.local {
			out = append(out, e.m)
		}
	}
	return out
}

// Unsaved returns how many messages wait for a save.
func (h *Handle) Unsaved() int {
	return locked(h, func() int { return len(savedOf(h.entries[h.synced:])) })
}

// Dirty reports whether the handle has anything unsaved.
func (h *Handle) Dirty() bool {
	return locked(h, func() bool { return h.summaryDirty || h.metadataDirty || len(savedOf(h.entries[h.synced:])) > 0 })
}

// Append adds messages to the handle, in memory: each gets a UUID id unless
// it has one and created_at unless set. The handle keeps copies, so the
// caller may reuse msgs. A nil message, an unspecified role, a malformed id
// or invalid UTF-8 (the rules the daemon applies to one message), an id
// already in the handle, or a ROLE_TOOL result that answers no open tool
// call (OpenToolCalls, or a call earlier in msgs) is ErrInvalid, and then
// nothing is appended. A result for a call a resume closed with a synthetic
// result (see Open) replaces that synthetic result. While a StreamTurn is
// open, Append is ErrMessageState: the turn's message comes first.
func (h *Handle) Append(msgs ...*sessiondv1.Message) error {
	add, err := h.prepare(msgs)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: append: %w", ErrClosed)
	}
	if h.turn != "" {
		return errorf("client: append: a live turn is open; finish it first: %w", ErrMessageState)
	}
	for _, e := range add {
		if _, dup := h.ids[e.m.Id]; dup {
			return errorf("client: append: message id %q is already in the session: %w", e.m.Id, ErrInvalid)
		}
	}
	batch := savedOf(add)
	// The session's open calls (a walk of every message) matter only to a
	// batch that makes or answers calls; a turn of plain text skips it.
	if msgcheck.TouchesCalls(batch) {
		open, _ := msgcheck.OpenCalls(nil, "", savedOf(h.entries), false)
		if _, f := msgcheck.OpenCalls(open, "messages", batch, true); f != nil {
			return errorf("client: append: %s %s: %w", f.Field, f.Description, ErrInvalid)
		}
	}
	old := h.snapshotLocked()
	h.dropSyntheticLocked(batch)
	h.entries = append(h.entries, add...)
	if err := h.syncSpoolLocked(); err != nil {
		h.restoreLocked(old)
		return errorf("client: append: %w", err)
	}
	for _, e := range add {
		h.ids[e.m.Id] = struct{}{}
	}
	h.poke()
	return nil
}

// dropSyntheticLocked removes the synthetic results (local entries) of the
// calls the ROLE_TOOL messages of batch answer. It never modifies the
// entries array in place, so a snapshot taken before stays valid.
func (h *Handle) dropSyntheticLocked(batch []*sessiondv1.Message) {
	answered := map[string]bool{}
	for _, m := range batch {
		if m.GetRole() == sessiondv1.Role_ROLE_TOOL && m.GetToolCallId() != "" {
			answered[m.GetToolCallId()] = true
		}
	}
	if len(answered) == 0 {
		return
	}
	drop := func(e entry) bool { return e.local && msgcheck.IsSynthetic(e.m) && answered[e.m.GetToolCallId()] }
	if !slices.ContainsFunc(h.entries, drop) {
		return
	}
	synced := len(slices.DeleteFunc(slices.Clone(h.entries[:h.synced]), drop))
	h.setEntriesLocked(slices.DeleteFunc(slices.Clone(h.entries), drop), synced)
}

// prepare copies msgs into entries for Append, giving each an id and
// created_at where missing. A message that breaks the daemon's rules for
// one message (msgcheck.Message: nil, no or unknown role, invalid UTF-8, a
// bad id) or an id repeated within msgs is ErrInvalid.
func (h *Handle) prepare(msgs []*sessiondv1.Message) ([]entry, error) {
	now := timestamppb.Now()
	entries := make([]entry, 0, len(msgs))
	ids := make(map[string]struct{}, len(msgs))
	for i, m := range msgs {
		// A message the daemon would refuse fails here, not in a
		// background save.
		if f := msgcheck.Message(fmt.Sprintf("messages[%d]", i), m); f != nil {
			return nil, errorf("client: append: %s %s: %w", f.Field, f.Description, ErrInvalid)
		}
		c := proto.CloneOf(m)
		if c.Id == "" {
			c.Id = newID()
		}
		if c.CreatedAt == nil {
			c.CreatedAt = now
		}
		if _, dup := ids[c.Id]; dup {
			return nil, errorf("client: append: message id %q repeats: %w", c.Id, ErrInvalid)
		}
		ids[c.Id] = struct{}{}
		entries = append(entries, entry{m: c, local: h.opts.noSystem && c.GetRole() == sessiondv1.Role_ROLE_SYSTEM})
	}
	return entries, nil
}

// SetSummary sets the session's summary; the next save sends it.
func (h *Handle) SetSummary(summary string) error {
	return h.set("set summary", func() { h.summary, h.summaryDirty = summary, true })
}

// SetMetadata replaces the session's metadata; the next save sends it.
func (h *Handle) SetMetadata(md map[string]string) error {
	return h.set("set metadata", func() { h.metadata, h.metadataDirty = maps.Clone(md), true })
}

// set applies a Set* change, undoing it if the spool cannot record it.
func (h *Handle) set(op string, change func()) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: %s: %w", op, ErrClosed)
	}
	old := h.snapshotLocked()
	change()
	if err := h.syncSpoolLocked(); err != nil {
		h.restoreLocked(old)
		return errorf("client: %s: %w", op, err)
	}
	h.poke()
	return nil
}

// poke wakes the idle-save timer. Called with mu held.
func (h *Handle) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Save sends what the handle has that the daemon does not: a changed
// summary or metadata with UpdateSession, then new messages with
// AppendMessages, each guarded by the revision the handle last saw. It
// returns when the daemon has acknowledged, or with ctx's error. Nothing
// unsaved is dropped on failure; a later Save sends it again, and the daemon
// stores only the messages it lacks. A session changed by another writer is
// ErrConflict: Reload, then Save.
func (h *Handle) Save(ctx context.Context) error {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	err := h.saveLocked(ctx, false)
	if err == nil {
		h.mu.Lock()
		h.paused = nil
		h.mu.Unlock()
	}
	return err
}

// errKeptChanging: Close could not catch up with concurrent changes. It is
// not final, so Close keeps trying until its ctx ends.
var errKeptChanging = errors.New("client: the handle kept changing during Close")

// saveLocked sends what is unsaved: one update at most, then appends until
// the messages present when it was called are stored. With closeWhenClean
// it instead saves until the handle is clean and closes it in the same
// critical section that finds nothing left, so that no Append can slip in
// between. saveMu must be held.
func (h *Handle) saveLocked(ctx context.Context, closeWhenClean bool) error {
	updated := false
	for range 64 {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errorf("client: save: %w", ErrClosed)
		}
		var update *sessiondv1.UpdateSessionRequest
		if !updated || closeWhenClean {
			update = h.updateLocked()
		}
		var batch []*sessiondv1.Message
		if update == nil {
			batch = savedOf(h.entries[h.synced:])
			if len(batch) == 0 {
				// Only local messages are new, if anything.
				h.synced = len(h.entries)
			}
		}
		partial := h.resend > 0 && h.resend < len(batch)
		if partial {
			batch = batch[:h.resend]
		}
		done := update == nil && len(batch) == 0
		if done && closeWhenClean {
			h.closed = true
		}
		expected := h.revision
		h.mu.Unlock()
		var err error
		switch {
		case done:
			return nil
		case update != nil:
			err = h.sendUpdate(ctx, update, expected)
			updated = true
		default:
			err = h.sendAppend(ctx, batch, expected)
			if err == nil && !partial && !closeWhenClean {
				return nil
			}
		}
		if err != nil {
			return errorf("save %s: %w", h.id, err)
		}
	}
	if closeWhenClean {
		return errKeptChanging
	}
	return errorf("client: save %s: still unsaved after 64 writes", h.id)
}

// updateLocked returns the UpdateSession a changed summary or metadata
// needs, or nil. Called with mu held.
func (h *Handle) updateLocked() *sessiondv1.UpdateSessionRequest {
	if !h.summaryDirty && !h.metadataDirty {
		return nil
	}
	req := &sessiondv1.UpdateSessionRequest{Ref: h.c.ref(ID(h.id)), Session: &sessiondv1.Session{},
		UpdateMask: &fieldmaskpb.FieldMask{}, ExpectedRevision: h.revision}
	if h.summaryDirty {
		SetSummary(h.summary)(req)
	}
	if h.metadataDirty {
		SetMetadata(maps.Clone(h.metadata))(req)
	}
	return req
}

// advanceLocked takes the answer of a write sent at revision expected. An
// answer beyond expected+1 means the write was a retry of one that landed
// and another writer changed the session since: keeping expected+1 makes
// the next write find that conflict rather than adopt a session the handle
// has not seen. Called with mu held.
func (h *Handle) advanceLocked(rev, expected uint64) {
	h.revision = min(rev, expected+1)
}

// sendUpdate sends a changed summary or metadata. Setting what is already
// stored is a no-op for the daemon, so a retry of an update that landed
// succeeds.
func (h *Handle) sendUpdate(ctx context.Context, req *sessiondv1.UpdateSessionRequest, expected uint64) error {
	sess, err := h.c.update(ctx, req)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advanceLocked(sess.Revision, expected)
	h.alias, h.title, h.titleDerived = sess.Alias, sess.Title, sess.TitleDerived
	// A Set* made while the update was out leaves the field dirty.
	if slices.Contains(req.UpdateMask.Paths, "summary") && h.summary == req.Session.Summary {
		h.summaryDirty = false
	}
	if slices.Contains(req.UpdateMask.Paths, "metadata") && maps.Equal(h.metadata, req.Session.Metadata) {
		h.metadataDirty = false
	}
	h.refreshSpoolLocked()
	return nil
}

// sendAppend appends batch, the first unsaved messages. The daemon skips
// those it holds already, so resending a batch whose answer was lost
// stores nothing twice.
func (h *Handle) sendAppend(ctx context.Context, batch []*sessiondv1.Message, expected uint64) error {
	req := &sessiondv1.AppendMessagesRequest{Ref: h.c.ref(ID(h.id)), Messages: batch, ExpectedRevision: expected}
	var res AppendResult
	var err error
	if h.appended {
		res, err = h.c.appendStreamed(ctx, req)
	} else {
		res, err = h.c.append(ctx, req)
	}
	h.appended = true
	if err != nil {
		h.resend = len(batch)
		return err
	}
	h.resend = 0
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advanceLocked(res.Revision, expected)
	// Entries after synced are only ever appended (a dropped synthetic
	// result is local), so the batch is the first len(batch) saved ones.
	for n := 0; n < len(batch); h.synced++ {
		if !h.entries[h.synced].local {
			n++
		}
	}
	h.refreshSpoolLocked()
	return nil
}

// saveRetry saves, retrying what may succeed later with exponential backoff
// and jitter (cenkalti/backoff), until it succeeds, fails for good, ctx
// ends, or (attempts > 0) it has tried that many times. attemptTTL > 0
// bounds each attempt. When ctx ends, the error names the last failure too,
// which says more than the context's.
func (h *Handle) saveRetry(ctx context.Context, attempts uint, attemptTTL time.Duration, closeWhenClean bool) error {
	var last error
	n := 0
	attempt := func() (struct{}, error) {
		n++
		actx, cancel := ctx, context.CancelFunc(func() {})
		if attemptTTL > 0 {
			actx, cancel = context.WithTimeout(ctx, attemptTTL)
		}
		defer cancel()
		err := h.saveLocked(actx, closeWhenClean)
		if err != nil && !retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		if err != nil && ctx.Err() != nil && last != nil {
			err = errorf("%w; before that: %w", err, last)
		}
		if err != nil {
			last = err
		}
		return struct{}{}, err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = backoffBase, backoffMax, 2, 0.5
	_, err := backoff.Retry(ctx, attempt,
		backoff.WithBackOff(b),
		backoff.WithMaxTries(attempts), // 0: no limit but ctx
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, next time.Duration) {
			h.c.conn.log.Debug("sessiond save failed; retrying",
				"session", h.id, "attempt", n, "next", next, "err", err)
		}))
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return perm.Unwrap()
	}
	if err != nil && last != nil && !errors.Is(err, last) {
		// Retry gave up with ctx's error while waiting between attempts.
		return errorf("%w: %w", err, last)
	}
	return err
}

// Reload fetches the stored session and puts the handle's unsaved messages
// after its messages, to be appended by the next save: the answer to
// ErrConflict. Unsaved messages the daemon already holds (a save whose answer
// was lost) count as stored. An unsaved summary or metadata is kept.
func (h *Handle) Reload(ctx context.Context) error {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if locked(h, func() bool { return h.closed }) {
		return errorf("client: reload: %w", ErrClosed)
	}
	sess, loaded, err := h.c.Load(ctx, ID(h.id), LoadOptions{CloseOpenToolCalls: true})
	if err != nil {
		return errorf("reload %s: %w", h.id, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	entries := withLocals(loaded, h.entries[:h.synced])
	synced := len(entries)
	storedIDs := make(map[string]struct{}, len(loaded))
	for _, m := range loaded {
		storedIDs[m.GetId()] = struct{}{}
	}
	for _, e := range h.entries[h.synced:] {
		if _, ok := storedIDs[e.m.GetId()]; !ok || e.local {
			entries = append(entries, e)
		}
	}
	h.setEntriesLocked(entries, synced)
	h.resend = 0
	h.revision, h.alias, h.title, h.titleDerived = sess.Revision, sess.Alias, sess.Title, sess.TitleDerived
	if !h.summaryDirty {
		h.summary = sess.Summary
	}
	if !h.metadataDirty {
		h.metadata = sess.Metadata
	}
	if n := len(loaded); h.turn != "" && (n == 0 || loaded[n-1].GetId() != h.turn ||
		loaded[n-1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING) {
		h.turn = "" // the daemon closed it
	}
	h.paused = nil
	h.refreshSpoolLocked()
	return nil
}

// Rewind saves what is pending, then keeps the session's first keep stored
// messages on the daemon and in the handle (local system messages do not
// count). Messages appended while it runs stay, after the kept ones. keep
// beyond the stored messages is ErrInvalid.
func (h *Handle) Rewind(ctx context.Context, keep int64) error {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if err := h.saveLocked(ctx, false); err != nil {
		return err
	}
	h.mu.Lock()
	stored := int64(len(savedOf(h.entries[:h.synced])))
	rev := h.revision
	h.mu.Unlock()
	if keep < 0 || keep > stored {
		return errorf("client: rewind %s to %d messages: it holds %d: %w", h.id, keep, stored, ErrInvalid)
	}
	sess, err := h.c.Rewind(ctx, ID(h.id), keep, rev)
	if err != nil {
		return errorf("rewind %s: %w", h.id, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := slices.Clone(firstStored(h.entries[:h.synced], keep))
	synced := len(kept)
	h.setEntriesLocked(append(kept, h.entries[h.synced:]...), synced)
	h.advanceLocked(sess.Revision, rev)
	h.refreshSpoolLocked()
	return nil
}

// Reset saves what is pending, then clears the session's messages, keeping
// the session (its id, alias, title and metadata) and the handle's local
// system messages.
func (h *Handle) Reset(ctx context.Context) error {
	return h.Rewind(ctx, 0)
}

// Fork saves what is pending, forks the session on the daemon (o.MessageCount
// counts stored messages; 0 copies all) and opens the fork with the handle's
// options followed by opts. The handle stays open. Local system messages come
// along.
func (h *Handle) Fork(ctx context.Context, o ForkOptions, opts ...HandleOption) (*Handle, error) {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if err := h.saveLocked(ctx, false); err != nil {
		return nil, err
	}
	sess, err := h.c.Fork(ctx, ID(h.id), o)
	if err != nil {
		return nil, errorf("fork %s: %w", h.id, err)
	}
	fsess, loaded, err := h.c.Load(ctx, ID(sess.ID), LoadOptions{CloseOpenToolCalls: true})
	if err != nil {
		return nil, errorf("fork %s: open %s: %w", h.id, sess.ID, err)
	}
	keep := o.MessageCount
	if keep == 0 {
		keep = -1
	}
	entries := locked(h, func() []entry { return withLocals(loaded, firstStored(h.entries[:h.synced], keep)) })
	return newHandle(h.c, fsess, entries, append(slices.Clone(h.base), opts...)), nil
}

// Close stops auto-save, then saves what is left, retrying with backoff
// until ctx ends (or WithCloseTimeout passes, when ctx has no deadline). On
// success the handle is closed: later calls return ErrClosed and a second
// Close returns nil. If the save fails, Close returns its error and the
// handle stays open, auto-save included, with its unsaved messages intact.
// A live turn still open stays open: the daemon's idle sweep closes it as
// interrupted.
func (h *Handle) Close(ctx context.Context) error {
	h.closeMu.Lock()
	defer h.closeMu.Unlock()
	if locked(h, func() bool { return h.closed }) {
		return nil
	}
	h.stopLoop()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.opts.closeTimeout)
		defer cancel()
	}
	h.saveMu.Lock()
	err := h.saveRetry(ctx, 0, 0, true)
	h.saveMu.Unlock()
	if err != nil {
		h.startLoop()
		return errorf("client: close: %w", err)
	}
	return nil
}

// startLoop starts the auto-save goroutine if the options ask for one.
// closeMu must be held.
func (h *Handle) startLoop() {
	if h.opts.autoSave <= 0 && h.opts.idleSave <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.loopStop, h.loopDone = cancel, make(chan struct{})
	go h.loop(ctx, h.loopDone)
}

// stopLoop stops the auto-save goroutine and waits for it, so that no
// auto-save runs during or after the final save. closeMu must be held.
func (h *Handle) stopLoop() {
	if h.loopStop == nil {
		return
	}
	h.loopStop()
	<-h.loopDone
	h.loopStop, h.loopDone = nil, nil
}

func (h *Handle) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	var tick <-chan time.Time
	if h.opts.autoSave > 0 {
		t := time.NewTicker(h.opts.autoSave)
		defer t.Stop()
		tick = t.C
	}
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			h.autoSave(ctx)
		case <-h.kick:
			if h.opts.idleSave > 0 {
				idle.Reset(h.opts.idleSave)
			}
		case <-idle.C:
			h.autoSave(ctx)
		}
	}
}

// autoSave runs one auto-save round: a few attempts, then a report.
func (h *Handle) autoSave(ctx context.Context) {
	if locked(h, func() bool { return h.paused != nil || h.closed }) || !h.Dirty() {
		return
	}
	h.saveMu.Lock()
	err := h.saveRetry(ctx, autoSaveAttempts, autoSaveAttemptTTL, false)
	h.saveMu.Unlock()
	if err == nil || ctx.Err() != nil {
		return // saved, or stopped by Close, which saves next
	}
	if !retryable(err) {
		// A conflict or a refusal will not go away by itself: stop until
		// the caller acts (Reload, or a successful Save).
		h.mu.Lock()
		h.paused = err
		h.mu.Unlock()
	}
	err = errorf("client: auto-save: %w", err)
	if h.opts.onError != nil {
		h.opts.onError(err)
		return
	}
	h.c.conn.log.Warn("sessiond auto-save failed", "session", h.id, "err", err)
}

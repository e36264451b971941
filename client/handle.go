package client

import (
	"cmp"
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

// WithSpool keeps the handle's unsaved messages (and an unsaved summary or
// metadata) in a spool file in dir, created 0700 if missing, so
// that nothing is lost when the program quits or crashes while the daemon
// is down. Every change is in the file, fsync'd and checksummed, before the
// call that made it returns (Append and the Set* methods fail with ErrSpool,
// changing nothing, if it cannot be written); a save that leaves the handle
// clean removes the file.
//
// The next Open (or OpenOrCreate) of the session with WithSpool and the same
// dir sends the spooled messages before it returns, leaving out any the
// daemon already holds (ids make this idempotent), and removes the spool
// files. If that save fails, Open fails and the messages stay spooled. A
// damaged spool file is never sent nor deleted: Open renames it to
// "<file>.damaged" and fails with ErrSpool naming it.
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
	// Fork) so that the stored prefix and the revision change in one order.
	// It is taken before mu, never after.
	saveMu sync.Mutex
	// appended: the handle has sent an append (saveMu guards it). Its
	// later ones go over the connection's AppendStream, which a handle
	// that writes once never opens.
	appended bool

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
	// synced: entries[:synced] are stored (or local). Saves send what comes
	// after.
	synced int
	// summaryDirty and metadataDirty say what UpdateSession must send.
	summaryDirty, metadataDirty bool
	// paused holds the final error that stopped auto-save (a conflict, a
	// refusal); a successful Save or Reload clears it.
	paused error
	closed bool
	// spoolPath is this handle's spool file (WithSpool), or ""; spooled
	// says it exists.
	spoolPath string
	spooled   bool
}

// Open opens an existing session by id or alias, loading its messages. A
// missing session is ErrNotFound.
//
// The messages are loaded with CloseOpenToolCalls, so that what Messages
// returns is a history a model API accepts even if the program stopped
// between a tool call and its result: each call left open is followed by a
// synthetic result saying it was interrupted. Those results are the
// handle's local entries, like the system messages WithoutSystemMessages
// keeps out of the store: Messages shows them, saves never send them, and
// counts (Rewind, Fork) leave them out. OpenToolCalls still lists the
// calls, which the program may answer: appending a real result for one
// drops its synthetic result from the handle.
func (c *Client) Open(ctx context.Context, r Ref, opts ...HandleOption) (*Handle, error) {
	hc := c.In(r.namespace(c.namespace))
	sess, msgs, err := hc.Load(ctx, r, LoadOptions{CloseOpenToolCalls: true})
	if err != nil {
		return nil, err
	}
	stored, synthetic := splitSynthetic(msgs)
	h := newHandle(hc, sess, stored, synthetic, opts)
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
	return newHandle(hc, sess, nil, nil, opts), nil
}

// New creates a session (with the WithAlias, WithTitle, WithLabels and
// WithSessionMetadata options) and opens it.
func (c *Client) New(ctx context.Context, opts ...HandleOption) (*Handle, error) {
	o := applyOptions(opts)
	sess, err := c.Create(ctx, CreateOptions{ID: newID(), Alias: o.alias, Title: o.title, Labels: o.labels, Metadata: o.md})
	if err != nil {
		return nil, err
	}
	return newHandle(c, sess, nil, nil, opts), nil
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

// localAt is a local entry and how many stored messages come before it.
type localAt struct {
	e     entry
	after int64
}

// splitSynthetic separates what a load with CloseOpenToolCalls made up
// (msgcheck.IsSynthetic: the daemon refuses to store such a message, so
// only a load makes one) from the stored messages: the synthetic results
// become local entries at their positions.
func splitSynthetic(msgs []*sessiondv1.Message) ([]*sessiondv1.Message, []localAt) {
	stored := msgs[:0:0]
	var synthetic []localAt
	for _, m := range msgs {
		if msgcheck.IsSynthetic(m) {
			synthetic = append(synthetic, localAt{e: entry{m: m, local: true}, after: int64(len(stored))})
			continue
		}
		stored = append(stored, m)
	}
	return stored, synthetic
}

// withSynthetic returns the handle's own local entries among locals (its
// system messages) together with synthetic, a fresh load's synthetic
// results, in position order: a reload replaces the old synthetic results.
func withSynthetic(locals, synthetic []localAt) []localAt {
	out := slices.DeleteFunc(slices.Clone(locals), func(l localAt) bool { return msgcheck.IsSynthetic(l.e.m) })
	out = append(out, synthetic...)
	slices.SortStableFunc(out, func(a, b localAt) int { return cmp.Compare(a.after, b.after) })
	return out
}

// merge interleaves local entries among stored messages at their positions.
func merge(stored []*sessiondv1.Message, locals []localAt) []entry {
	out := make([]entry, 0, len(stored)+len(locals))
	li := 0
	for i := 0; i <= len(stored); i++ {
		for li < len(locals) && locals[li].after <= int64(i) {
			out = append(out, locals[li].e)
			li++
		}
		if i < len(stored) {
			out = append(out, entry{m: stored[i]})
		}
	}
	for ; li < len(locals); li++ {
		out = append(out, locals[li].e)
	}
	return out
}

func newHandle(c *Client, sess *Session, stored []*sessiondv1.Message, locals []localAt, opts []HandleOption) *Handle {
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
	h.entries = merge(stored, locals)
	h.synced = len(h.entries)
	if h.opts.spoolDir != "" {
		h.spoolPath = filepath.Join(h.opts.spoolDir, spoolPrefix(c.namespace, h.id)+newID()+spoolExt)
	}
	h.ids = make(map[string]struct{}, len(h.entries))
	for _, e := range h.entries {
		h.ids[e.m.GetId()] = struct{}{}
	}
	h.closeMu.Lock()
	h.startLoop()
	h.closeMu.Unlock()
	return h
}

// ID returns the session's id: what resumes it.
func (h *Handle) ID() string { return h.id }

// Namespace returns the session's namespace.
func (h *Handle) Namespace() string { return h.c.namespace }

// Alias returns the session's alias as last seen, or "".
func (h *Handle) Alias() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.alias
}

// Title returns the session's title as last seen.
func (h *Handle) Title() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.title
}

// Summary returns the handle's summary.
func (h *Handle) Summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.summary
}

// Metadata returns a copy of the handle's session metadata.
func (h *Handle) Metadata() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.metadata)
}

// Revision returns the session's revision as of the handle's last exchange
// with the daemon.
func (h *Handle) Revision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.revision
}

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
	open, _ := msgcheck.OpenCalls(nil, "", h.savedMessagesLocked(), false)
	return open
}

// savedMessagesLocked returns the messages a save sends or sent: every
// entry but the local ones.
func (h *Handle) savedMessagesLocked() []*sessiondv1.Message { return savedOf(h.entries) }

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
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.savable(h.synced, len(h.entries))
}

// Dirty reports whether the handle has anything unsaved.
func (h *Handle) Dirty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirtyLocked()
}

func (h *Handle) dirtyLocked() bool {
	return h.summaryDirty || h.metadataDirty || h.savable(h.synced, len(h.entries)) > 0
}

// savable counts the entries of entries[from:to] that a save sends.
func (h *Handle) savable(from, to int) int {
	n := 0
	for _, e := range h.entries[from:to] {
		if !e.local {
			n++
		}
	}
	return n
}

// Append adds messages to the handle, in memory: each gets a UUID id unless
// it has one and created_at unless set. The handle keeps copies, so the
// caller may reuse msgs. A nil message, an unspecified role, a malformed id
// or invalid UTF-8 (the rules the daemon applies to one message), an id
// already in the handle, or a ROLE_TOOL result that answers no open tool
// call (OpenToolCalls, or a call earlier in msgs) is ErrInvalid, and then
// nothing is appended. A result for a call a resume closed with a synthetic
// result (see Open) replaces that synthetic result.
func (h *Handle) Append(msgs ...*sessiondv1.Message) error {
	add, ids, err := h.prepare("append", msgs)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: append: %w", ErrClosed)
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
		open, _ := msgcheck.OpenCalls(nil, "", h.savedMessagesLocked(), false)
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
	maps.Copy(h.ids, ids)
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
	// Positions are compared with synced as it was before any entry was
	// dropped.
	synced := h.synced
	kept := make([]entry, 0, len(h.entries))
	h.ids = maps.Clone(h.ids)
	for i, e := range h.entries {
		if !drop(e) {
			kept = append(kept, e)
			continue
		}
		delete(h.ids, e.m.GetId())
		if i < synced {
			h.synced--
		}
	}
	h.entries = kept
}

// prepare copies msgs into entries for Append, giving each
// an id and created_at where missing, and returns their ids. A message that
// breaks the daemon's rules for one message (msgcheck.Message: nil, no or
// unknown role, invalid UTF-8, a bad id) or an id repeated within msgs is
// ErrInvalid.
func (h *Handle) prepare(op string, msgs []*sessiondv1.Message) ([]entry, map[string]struct{}, error) {
	now := timestamppb.Now()
	entries := make([]entry, 0, len(msgs))
	ids := make(map[string]struct{}, len(msgs))
	for i, m := range msgs {
		// The daemon's own rules for one message: a message the daemon
		// would refuse fails here, not in a background save.
		if f := msgcheck.Message(fmt.Sprintf("messages[%d]", i), m); f != nil {
			return nil, nil, errorf("client: %s: %s %s: %w", op, f.Field, f.Description, ErrInvalid)
		}
		c := proto.CloneOf(m)
		if c.Id == "" {
			c.Id = newID()
		}
		if c.CreatedAt == nil {
			c.CreatedAt = now
		}
		if _, dup := ids[c.Id]; dup {
			return nil, nil, errorf("client: %s: message id %q repeats: %w", op, c.Id, ErrInvalid)
		}
		ids[c.Id] = struct{}{}
		entries = append(entries, entry{m: c, local: h.opts.noSystem && c.GetRole() == sessiondv1.Role_ROLE_SYSTEM})
	}
	return entries, ids, nil
}

// SetSummary sets the session's summary; the next save sends it.
func (h *Handle) SetSummary(summary string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: set summary: %w", ErrClosed)
	}
	old := h.snapshotLocked()
	h.summary, h.summaryDirty = summary, true
	if err := h.syncSpoolLocked(); err != nil {
		h.restoreLocked(old)
		return errorf("client: set summary: %w", err)
	}
	h.poke()
	return nil
}

// SetMetadata replaces the session's metadata; the next save sends it.
func (h *Handle) SetMetadata(md map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: set metadata: %w", ErrClosed)
	}
	old := h.snapshotLocked()
	h.metadata, h.metadataDirty = maps.Clone(md), true
	if err := h.syncSpoolLocked(); err != nil {
		h.restoreLocked(old)
		return errorf("client: set metadata: %w", err)
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

// write is one RPC of a save, built from the handle's state under mu and
// sent without it.
type write struct {
	append   *sessiondv1.AppendMessagesRequest
	update   *sessiondv1.UpdateSessionRequest
	expected uint64
	// last is the batch's last message: once it is stored, so is every
	// entry up to it.
	last *sessiondv1.Message
	// The summary and metadata an update carries; each is no longer dirty
	// once saved unless a Set* changed it meanwhile.
	summary, metadata bool
	summaryVal        string
	metadataVal       map[string]string
}

// Save sends what the handle has that the daemon does not: new messages with
// AppendMessages, then a changed summary or metadata with UpdateSession. It
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

// saveLocked runs the writes the handle needs, one after another, until
// everything present when it was called is saved (later appends go along
// when they are already there). With closeWhenClean it instead saves until
// the handle is clean and closes it in the same critical section that finds
// nothing left, so that no Append can slip in between. saveMu must be held.
func (h *Handle) saveLocked(ctx context.Context, closeWhenClean bool) error {
	h.mu.Lock()
	goal := h.lastSavableLocked()
	metaGoal := h.summaryDirty || h.metadataDirty
	h.mu.Unlock()
	// A save needs the messages, the metadata and, after a lost answer, one
	// catch-up; Close allows for a few rounds of appends made meanwhile.
	passes := 4
	if closeWhenClean {
		passes = 64
	}
	for range passes {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errorf("client: save: %w", ErrClosed)
		}
		goalSaved := h.storedLocked(goal)
		if !closeWhenClean && goalSaved && !metaGoal {
			h.mu.Unlock()
			return nil
		}
		w := h.nextWrite(!closeWhenClean && goalSaved)
		if w == nil && closeWhenClean {
			h.closed = true
		}
		h.mu.Unlock()
		if w == nil {
			return nil
		}
		if err := h.send(ctx, w); err != nil {
			return err
		}
		if w.update != nil {
			metaGoal = false
		}
	}
	if closeWhenClean {
		return errKeptChanging
	}
	return errorf("client: save %s: still unsaved after %d writes", h.id, passes)
}

// lastSavableLocked returns the last message a save sends, or nil. Called
// with mu held.
func (h *Handle) lastSavableLocked() *sessiondv1.Message {
	for i := len(h.entries) - 1; i >= 0; i-- {
		if !h.entries[i].local {
			return h.entries[i].m
		}
	}
	return nil
}

// storedLocked reports whether m (an entry's message, or nil) is stored: no
// longer in the handle (a Reload or Rewind replaced it) or among
// entries[:synced]. Called with mu held.
func (h *Handle) storedLocked(m *sessiondv1.Message) bool {
	if m == nil {
		return true
	}
	i := h.indexLocked(m)
	return i < 0 || i < h.synced
}

// indexLocked returns the index of the entry holding m, or -1. Called with
// mu held.
func (h *Handle) indexLocked(m *sessiondv1.Message) int {
	for i := len(h.entries) - 1; i >= 0; i-- {
		if h.entries[i].m == m {
			return i
		}
	}
	return -1
}

// nextWrite builds the next RPC a save needs, or nil when the handle is
// clean. metaFirst sends a changed summary or metadata before new messages:
// a Save whose messages are out already must not be kept waiting by appends
// made since. Called with mu held.
func (h *Handle) nextWrite(metaFirst bool) *write {
	if metaFirst {
		if w := h.updateWrite(); w != nil {
			return w
		}
	}
	if w := h.appendWrite(); w != nil {
		return w
	}
	return h.updateWrite()
}

// appendWrite is an AppendMessages of the savable entries after synced, or
// nil. Called with mu held.
func (h *Handle) appendWrite() *write {
	batch := savedOf(h.entries[h.synced:])
	if len(batch) == 0 {
		// Only local system messages are new, if anything: nothing to send.
		h.synced = len(h.entries)
		return nil
	}
	return &write{expected: h.revision, last: batch[len(batch)-1],
		append: &sessiondv1.AppendMessagesRequest{Ref: h.c.ref(ID(h.id)), Messages: batch, ExpectedRevision: h.revision}}
}

// updateWrite is an UpdateSession of a changed summary or metadata, or nil.
// Called with mu held.
func (h *Handle) updateWrite() *write {
	if !h.summaryDirty && !h.metadataDirty {
		return nil
	}
	w := &write{expected: h.revision, summary: h.summaryDirty, metadata: h.metadataDirty,
		summaryVal: h.summary, metadataVal: h.metadata}
	w.update = &sessiondv1.UpdateSessionRequest{
		Ref: h.c.ref(ID(h.id)), Session: &sessiondv1.Session{}, UpdateMask: &fieldmaskpb.FieldMask{}, ExpectedRevision: h.revision,
	}
	if w.summary {
		w.update.Session.Summary = h.summary
		w.update.UpdateMask.Paths = append(w.update.UpdateMask.Paths, "summary")
	}
	if w.metadata {
		w.update.Session.Metadata = maps.Clone(h.metadata)
		w.update.UpdateMask.Paths = append(w.update.UpdateMask.Paths, "metadata")
	}
	return w
}

// send performs one write and records its outcome. A conflict that the
// handle's own earlier write explains (it landed, but its answer was lost)
// is caught up with instead of returned.
func (h *Handle) send(ctx context.Context, w *write) error {
	var (
		rev  uint64
		sess *Session
		err  error
	)
	if w.append != nil {
		var res AppendResult
		if h.appended {
			res, err = h.c.appendStreamed(ctx, w.append)
		} else {
			res, err = h.c.append(ctx, w.append)
		}
		h.appended = true
		rev = res.Revision
	} else {
		sess, err = h.c.update(ctx, w.update)
		if sess != nil {
			rev = sess.Revision
		}
	}
	if errors.Is(err, ErrConflict) {
		if caught, cerr := h.catchUp(ctx, w); cerr != nil {
			return errorf("save %s: %w; then: %w", h.id, err, cerr)
		} else if caught {
			return nil
		}
	}
	if err != nil {
		return errorf("save %s: %w", h.id, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// An answer beyond expected+1 means another writer changed the session
	// too (our append stored nothing new, or landed after theirs was
	// answered). Keep expected+1 so that the next write finds the conflict
	// instead of silently adopting a session the handle has not seen.
	h.revision = min(rev, w.expected+1)
	if sess != nil {
		h.alias, h.title, h.titleDerived = sess.Alias, sess.Title, sess.TitleDerived
	}
	h.recordLocked(w)
	h.refreshSpoolLocked()
	return nil
}

// recordLocked marks what w carried as saved. Called with mu held.
func (h *Handle) recordLocked(w *write) {
	if w.last != nil {
		if i := h.indexLocked(w.last); i >= 0 {
			h.synced = max(h.synced, i+1)
		}
	}
	if w.summary && h.summary == w.summaryVal {
		h.summaryDirty = false
	}
	if w.metadata && maps.Equal(h.metadata, w.metadataVal) {
		h.metadataDirty = false
	}
}

// catchUp answers a conflict on w: when the session is one write ahead of
// the handle and that write is the handle's own (messages it has not seen
// stored, or the very summary and metadata it has not seen saved), an
// earlier write of it landed without an answer reaching it. The handle then takes that write
// as saved and reports true; the save goes on with what is left. Anything
// else is another writer's change: false, and the conflict stands.
func (h *Handle) catchUp(ctx context.Context, w *write) (bool, error) {
	sess, stored, err := h.c.Load(ctx, ID(h.id), LoadOptions{})
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if sess.Revision != w.expected+1 || h.revision != w.expected {
		return false, nil
	}
	saved := savedOf(h.entries[:h.synced])
	if len(stored) < len(saved) {
		return false, nil
	}
	for i, m := range saved {
		if stored[i].GetId() != m.GetId() {
			return false, nil
		}
	}
	landed := stored[len(saved):]
	var last *sessiondv1.Message
	if len(landed) > 0 {
		unsaved := savedOf(h.entries[h.synced:])
		if len(landed) > len(unsaved) {
			return false, nil
		}
		for i, m := range landed {
			if unsaved[i].GetId() != m.GetId() {
				return false, nil
			}
		}
		last = unsaved[len(landed)-1]
	} else if !h.summaryDirty && !h.metadataDirty ||
		h.summaryDirty && sess.Summary != h.summary ||
		h.metadataDirty && !maps.Equal(sess.Metadata, h.metadata) {
		return false, nil
	}
	h.revision = sess.Revision
	h.alias, h.title, h.titleDerived = sess.Alias, sess.Title, sess.TitleDerived
	if last != nil {
		h.recordLocked(&write{last: last})
	} else {
		h.summaryDirty, h.metadataDirty = false, false
	}
	h.refreshSpoolLocked()
	return true, nil
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
	if err := h.checkOpen("reload"); err != nil {
		return err
	}
	sess, loaded, err := h.c.Load(ctx, ID(h.id), LoadOptions{CloseOpenToolCalls: true})
	if err != nil {
		return errorf("reload %s: %w", h.id, err)
	}
	stored, synthetic := splitSynthetic(loaded)
	h.mu.Lock()
	defer h.mu.Unlock()
	storedIDs := make(map[string]struct{}, len(stored))
	for _, m := range stored {
		storedIDs[m.GetId()] = struct{}{}
	}
	// entries[:base] are the handle's view of the stored messages (and its
	// local system messages among them); the rest is unsaved.
	base := h.synced
	entries := merge(stored, withSynthetic(h.localsLocked(base, -1), synthetic))
	synced := len(entries)
	for _, e := range h.entries[base:] {
		if _, ok := storedIDs[e.m.GetId()]; ok && !e.local {
			continue
		}
		entries = append(entries, e)
	}
	h.entries, h.synced = entries, synced
	h.ids = make(map[string]struct{}, len(entries))
	for _, e := range entries {
		h.ids[e.m.GetId()] = struct{}{}
	}
	h.revision, h.alias, h.title, h.titleDerived = sess.Revision, sess.Alias, sess.Title, sess.TitleDerived
	if !h.summaryDirty {
		h.summary = sess.Summary
	}
	if !h.metadataDirty {
		h.metadata = sess.Metadata
	}
	h.paused = nil
	h.refreshSpoolLocked()
	return nil
}

// localsLocked returns the local entries of entries[:upto] that come before
// the (keep+1)-th stored message (keep < 0: all), with their positions.
func (h *Handle) localsLocked(upto int, keep int64) []localAt {
	var out []localAt
	var n int64
	for _, e := range h.entries[:upto] {
		if !e.local {
			n++
			continue
		}
		if keep >= 0 && n > keep {
			break
		}
		out = append(out, localAt{e: e, after: n})
	}
	return out
}

func (h *Handle) checkOpen(op string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errorf("client: %s: %w", op, ErrClosed)
	}
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
	stored := int64(h.savable(0, h.synced))
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
	var kept []entry
	var n int64
	for _, e := range h.entries[:h.synced] {
		if !e.local {
			if n == keep {
				break
			}
			n++
		}
		kept = append(kept, e)
	}
	synced := len(kept)
	kept = append(kept, h.entries[h.synced:]...)
	h.entries, h.synced = kept, synced
	h.ids = make(map[string]struct{}, len(kept))
	for _, e := range kept {
		h.ids[e.m.GetId()] = struct{}{}
	}
	h.revision = min(sess.Revision, rev+1)
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
	stored, synthetic := splitSynthetic(loaded)
	h.mu.Lock()
	keep := o.MessageCount
	if keep == 0 {
		keep = -1
	}
	locals := withSynthetic(h.localsLocked(h.synced, keep), synthetic)
	h.mu.Unlock()
	all := append(slices.Clone(h.base), opts...)
	return newHandle(h.c, fsess, stored, locals, all), nil
}

// Close stops auto-save, then saves what is left, retrying with backoff
// until ctx ends (or WithCloseTimeout passes, when ctx has no deadline). On
// success the handle is closed: later calls return ErrClosed and a second
// Close returns nil. If the save fails, Close returns its error and the
// handle stays open, auto-save included, with its unsaved messages intact.
func (h *Handle) Close(ctx context.Context) error {
	h.closeMu.Lock()
	defer h.closeMu.Unlock()
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
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
	h.mu.Lock()
	skip := h.paused != nil || h.closed || !h.dirtyLocked()
	h.mu.Unlock()
	if skip {
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

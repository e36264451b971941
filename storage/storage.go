// Package storage is the layer between the server and the backends: the
// Store the server calls, the Driver a backend implements, their plain Go
// request and option types, the request rules every backend shares, and the
// sentinel errors.
//
// # Layers
//
// In the manner of go-cloud's concrete *blob.Bucket over driver.Bucket, the
// Store is a concrete type over a backend's Driver. A backend's Open
// returns the Store over its Driver (New wraps one), so no caller reaches a
// Driver past the rules: the Store owns what every backend would otherwise
// repeat (see Store), and the Driver implements the primitives, applying
// the rules that need the stored state through this package's functions
// (see Driver), so that no rule is written twice.
//
// The server translates gRPC requests into these types and knows nothing of
// files or SQL; backends know nothing of RPC. The one protobuf type used here
// is the generated Message: messages are stored as their protobuf encoding so
// that fields unknown to this version of the daemon survive a round trip.
//
// # Monitoring
//
// A Driver may also implement StatsReporter (sessions, bytes on disk, its
// cache, open files, connection pool: plain numbers) and Pinger (whether
// its database answers), which the Store's Stats and Ping reach; a backend
// may take a flush observer that receives one FlushRecord per flush. The
// daemon turns these into metrics and health, so backends import no
// metrics library.
//
// # Concurrency
//
// Every Store method is safe for concurrent use. Writes to one session are
// serialised: a write without an expected revision is applied after every
// earlier write to that session. Writes to different sessions may run in
// parallel. A reader sees a session either before or after a write, never
// half of one.
//
// # Durability
//
// When a method that writes returns nil, the change is on stable storage
// (fsync'd files, or a committed transaction), and survives kill -9 of the
// process. A write that returns an error changed nothing.
//
// # Revisions and idempotency
//
// A new session has revision 1 (or, for an import, the revision
// CreateRequest.Revision names); every change bumps it by one. A write that
// changes nothing (an append whose messages are all already there with the
// same content, a save or update that sets what is already stored, a rewind to
// the current length) is a no-op: it returns the current state, bumps nothing
// and notifies no watcher. The no-op check comes before the expected-revision
// check, so a retry of a write that landed succeeds. A non-zero
// ExpectedRevision that differs from the session's revision is ErrConflict.
//
// Appends are idempotent message by message, so a client needs no
// bookkeeping to retry one: a message of the batch whose id is stored with
// the same content (SameMessage) is already there and is skipped; the
// others are appended in batch order as one change (one revision, one
// event holding only them), and AppendResult.Appended says how many. A
// stored id with other content is ErrMessageConflict and stores nothing.
// The expected revision applies only to a batch with new messages.
//
// # Tool calls, usage and retention
//
// Every session keeps a Tally derived from its messages: its open tool
// calls, its usage totals and the models its messages name. The rule that
// keeps a conversation one a model API accepts is applied by every write:
// a ROLE_TOOL message with a tool_call_id must answer an open call (made by
// an earlier assistant message of the session, or earlier in the batch, and
// answered by no other result), else ErrInvalid naming the field. Count and
// Tally.Add apply it; Recount derives a tally from stored messages (rewind,
// fork). A load with LoadOptions.CloseOpenToolCalls adds a synthetic result
// (SyntheticResult) for each open call; the metadata key SyntheticKey is
// reserved so such a result is never stored. A session's ExpireAfter is its
// idle time to live: a Sweeper deletes what Store.Expired finds.
//
// # Errors
//
// Methods return errors that wrap exactly one of the sentinels below, with
// context (which field, which session). Callers test them with errors.Is.
// Any other error is internal.
package storage

import (
	"errors"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Sentinel errors. Drivers wrap them with fmt.Errorf("...: %w", ErrX); the
// Store's argument errors are *FieldError (ErrInvalid) and
// *LimitError (ErrTooLarge).
var (
	// ErrNotFound: no session with that id or alias in the namespace.
	ErrNotFound = errors.New("session not found")
	// ErrAliasInUse: another session of the namespace has that alias.
	ErrAliasInUse = errors.New("alias in use")
	// ErrAlreadyExists: a session with that id exists (in any namespace) and
	// the create was not an exact retry.
	ErrAlreadyExists = errors.New("session already exists")
	// ErrMessageConflict: an appended message id is already in the session
	// with other content.
	ErrMessageConflict = errors.New("message id in use with other content")
	// ErrConflict: the expected revision did not match the session's.
	ErrConflict = errors.New("revision conflict")
	// ErrInvalid: a request field is malformed or out of range; the error
	// is a *FieldError naming the field.
	ErrInvalid = errors.New("invalid argument")
	// ErrNoSpace: the storage device is full; nothing was written.
	ErrNoSpace = errors.New("no space left on storage")
	// ErrDataLoss: the session's stored bytes failed their checksum or are
	// unreadable; other sessions are unaffected.
	ErrDataLoss = errors.New("stored session is damaged")
	// ErrWatchReset: a watch cannot continue from the requested revision
	// (history not kept, revision in the future, or the watcher fell behind):
	// reload the session, then watch from its current revision.
	ErrWatchReset = errors.New("watch must reload")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store closed")
	// ErrLocked: another process holds the store (its data dir lock).
	ErrLocked = errors.New("store is locked by another process")
	// ErrMessageState: a write needs a message in another state (a delta
	// or finish for a message that is not open, a delta past the end of
	// the message, an append while a message is open).
	ErrMessageState = errors.New("message is not in the state the write needs")
	// ErrUnsupported: the backend does not implement the feature (live
	// turns on a Driver that is not a LiveDriver).
	ErrUnsupported = errors.New("not supported by this storage backend")
)

// Ref names one session: by ID when ID is set, else by Alias.
type Ref struct {
	Namespace string
	ID        string
	Alias     string
}

// ForkOrigin says which session (same namespace) a fork was made from.
type ForkOrigin struct {
	SessionID    string
	MessageCount int64
}

// Session is a session's metadata. Maps are never shared with the store:
// callers may modify what they are given.
type Session struct {
	ID           string
	Namespace    string
	Alias        string
	Title        string
	Summary      string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	Revision     uint64
	MessageCount int64
	Metadata     map[string]string
	Labels       map[string]string
	Parent       *ForkOrigin // nil unless forked or imported with a parent
	// Tally is derived from the messages (open tool calls, usage, models)
	// by every write that changes them.
	Tally
	// ExpireAfter is the session's idle time to live (0: none of its own;
	// the daemon may apply a namespace default).
	ExpireAfter time.Duration
	// TitleDerived is set when Title was taken from the session's first
	// user message (DeriveTitle) rather than given by a client.
	TitleDerived bool
	// Compaction is the latest compaction's range (nil: none). It is
	// never modified in place, so copies of a Session may share it.
	Compaction *Compaction
}

// CreateRequest creates a session.
type CreateRequest struct {
	Namespace string
	// ID is an optional client-chosen UUID. If a session with this ID already
	// exists in Namespace at its starting revision with the same alias, title, summary,
	// metadata, labels, parent and messages, Create returns it (a retried
	// create); otherwise an existing ID is ErrAlreadyExists.
	ID       string
	Alias    string
	Title    string
	Summary  string
	Metadata map[string]string
	Labels   map[string]string
	Messages []*sessiondv1.Message
	// CreatedAt defaults to now; set by imports.
	CreatedAt time.Time
	// Parent is set by imports of forked sessions.
	Parent *ForkOrigin
	// Revision is the revision the new session starts at, set by imports so
	// that a session exported and imported again never goes back to a
	// revision a client holds; 0 means 1 (New's Create normalises it, so a
	// Driver sees 1 or more). At most MaxStartRevision.
	Revision uint64
	// ExpireAfter is the idle time to live (0: none); see ValidateExpireAfter.
	ExpireAfter time.Duration
	// TitleDerived is set by New's Create, never by callers: Title was
	// empty and was derived from Messages (see DeriveTitle).
	TitleDerived bool
}

// MaxStartRevision bounds CreateRequest.Revision, leaving room for any
// number of later changes within every backend's 63-bit revision column.
const MaxStartRevision = 1 << 62

// LoadOptions selects which messages Load returns.
type LoadOptions struct {
	Offset int64 // messages to skip from the start
	Limit  int64 // at most this many; 0 means all
	Tail   bool  // the last Limit messages instead; Offset must be 0
	// CloseOpenToolCalls adds, after each assistant message of the window
	// whose tool calls are open in the session, a synthetic ROLE_TOOL result
	// per open call (SyntheticResult), placed after the ROLE_TOOL messages
	// that directly follow the assistant message in the window. Nothing is
	// stored; Offset, Limit and Tail count stored messages only. The Store
	// adds them; a Driver never sees the flag set.
	CloseOpenToolCalls bool
	// View selects the messages Offset, Limit and Tail count within:
	// ViewFull every stored message, ViewContext the latest compaction's
	// summary, then the messages after its range (see ContextWindow).
	View LoadView
}

// Window returns the range [from, to) of a session of n messages that o
// selects. It never overflows, whatever o holds (a negative Offset or Limit
// counts as 0), so drivers use it rather than adding client numbers.
func (o LoadOptions) Window(n int64) (from, to int64) {
	n = max(n, 0)
	from, to = min(max(o.Offset, 0), n), n
	if o.Limit > 0 {
		if o.Tail {
			from = n - min(o.Limit, n)
		} else {
			to = from + min(o.Limit, n-from)
		}
	}
	return from, to
}

// Cursor is a position in the list order (UpdatedAt newest first, then ID
// ascending). A listing with After set resumes just after that position.
type Cursor struct {
	UpdatedAt time.Time
	ID        string
}

// ListOptions filters a listing. Zero values do not filter.
type ListOptions struct {
	Namespace     string
	AliasPrefix   string
	Labels        map[string]string // every pair must match
	UpdatedAfter  time.Time         // exclusive
	UpdatedBefore time.Time         // exclusive
	Limit         int64             // 0 means all
	After         *Cursor
	Model         string // only sessions whose Models hold it
}

// SaveRequest replaces a session's messages, title, summary and metadata.
type SaveRequest struct {
	Ref              Ref
	ExpectedRevision uint64
	Title            string
	Summary          string
	Metadata         map[string]string
	Messages         []*sessiondv1.Message
	// CreateIfMissing creates the session (with Ref's ID or Alias) when it
	// does not exist; the new session has revision 1.
	CreateIfMissing bool
	// TitleDerived is set by New's Save, never by callers: Title was
	// empty and was derived from Messages (see DeriveTitle).
	TitleDerived bool
}

// AppendRequest appends messages to a session.
type AppendRequest struct {
	Ref              Ref
	ExpectedRevision uint64
	Messages         []*sessiondv1.Message
}

// AppendResult is the session's state after an append (or an idempotent
// no-op), and how many of the batch's messages the append stored.
type AppendResult struct {
	Revision     uint64
	MessageCount int64
	Appended     int64
}

// UpdateField selects a field UpdateRequest changes.
type UpdateField uint8

// The fields UpdateRequest can change.
const (
	UpdateAlias UpdateField = 1 << iota // "" removes the alias
	UpdateTitle
	UpdateSummary
	UpdateMetadata
	UpdateLabels
	UpdateExpireAfter // 0 removes the session's own time to live
)

// UpdateRequest changes the fields named in Fields to the values given.
type UpdateRequest struct {
	Ref              Ref
	ExpectedRevision uint64
	Fields           UpdateField // at least one
	Alias            string
	Title            string
	Summary          string
	Metadata         map[string]string
	Labels           map[string]string
	ExpireAfter      time.Duration
}

// ForkRequest copies a session's first MessageCount messages (0 = all) into
// a new session of the same namespace, with Parent set, copying title (unless
// Title is set), summary, metadata, labels and expire_after.
type ForkRequest struct {
	Ref          Ref
	MessageCount int64
	Alias        string
	Title        string
}

// RewindRequest keeps a session's first MessageCount messages (0 clears all).
type RewindRequest struct {
	Ref              Ref
	MessageCount     int64
	ExpectedRevision uint64
}

// SearchOptions selects what Search looks for.
type SearchOptions struct {
	Namespace string
	Query     string // non-empty; matched case-insensitively
	Limit     int64  // 0 means all hits
}

// SearchHit is one match: in the session's title, alias or summary
// (MessageIndex -1), or in one of its messages' content, text parts or
// tool-call arguments.
type SearchHit struct {
	Session      *Session
	MessageIndex int64
	Snippet      string
}

// ExpiredOptions selects the sessions Expired yields.
type ExpiredOptions struct {
	Now time.Time
	// Defaults are the idle times to live of sessions without their own,
	// by namespace ("" is the default namespace).
	Defaults map[string]time.Duration
	Limit    int64 // at most this many; 0 means all
}

// Expires reports whether s is past its idle time to live at now, with
// defaults as in ExpiredOptions.
func (o ExpiredOptions) Expires(s *Session) bool {
	ttl := s.ExpireAfter
	if ttl <= 0 {
		ttl = o.Defaults[s.Namespace]
	}
	return ttl > 0 && !s.UpdatedAt.Add(ttl).After(o.Now)
}

// EventType says what kind of change an Event reports.
type EventType uint8

// The kinds of change.
const (
	EventAppended  EventType = iota + 1 // Messages holds the appended messages
	EventReplaced                       // save or rewind: reload the messages
	EventUpdated                        // metadata changed
	EventDeleted                        // the last event of a subscription
	EventCompacted                      // a compaction was stored; the messages are unchanged
	EventDelta                          // Delta holds what was added to the open message
	EventFinished                       // Messages holds the message just closed, whole
)

// Event is one change to a session. Session is its metadata after the change.
type Event struct {
	Type     EventType
	Revision uint64
	Session  *Session
	Messages []*sessiondv1.Message // for EventAppended and EventFinished only
	// Delta is what an AppendDelta added (EventDelta only): its offsets are
	// where it landed, and it holds only bytes that were new.
	Delta *sessiondv1.MessageDelta

	encoding *sharedEncoding // set by Broker.Publish; see Encoded
}

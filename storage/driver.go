package storage

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Driver is what a backend implements: the primitive operations on stored
// sessions, with none of the request rules. The Store that New
// returns checks every argument, applies the Limits and prepares messages
// before it calls a Driver, so a Driver receives only valid requests:
//
//   - every Ref has a valid namespace and either a canonical (lowercase)
//     session id or a valid alias, never both;
//   - aliases, titles, summaries, metadata and labels are valid and within
//     the limits; an UpdateRequest names at least one known field;
//   - counts, offsets and limits are not negative; a tail load has no offset;
//   - a search query is not empty;
//   - messages arrive as a Messages batch: already checked, with every id and
//     created_at filled in (the request's own Messages field is nil).
//
// The Store also admits a call only while it is open and the call's context
// has not ended, and closes the Driver only once the calls it admitted have
// returned; a Driver need not check either at entry.
//
// A Driver still decides what needs the stored state, under its own lock or
// transaction, using the shared rule functions of this package so that each
// rule is written once: CheckAppend (which messages are new, then the
// expected revision and the new tally), CheckRevision, SameCreate, SameSave, ApplyUpdate, CheckCount,
// and Tally.Add and Recount, which keep Session.Tally (open tool calls,
// usage, models) and apply the tool-call pairing rule.
//
// # Errors
//
// A Driver returns errors that wrap the package's sentinels (ErrNotFound,
// ErrAliasInUse, ErrConflict, ...) or the context's error; anything else is
// an internal error. Callers never parse error text: a Driver's wording may
// name its own internals (paths, SQL) and is logged, not shown to clients,
// except for ErrInvalid, ErrTooLarge, ErrConflict, ErrAliasInUse,
// ErrMessageConflict and ErrMessageState, whose text the server shows. Those texts must
// therefore name the field, alias or revision and nothing internal, without
// a backend prefix.
//
// # Concurrency and durability
//
// The package doc's contracts (concurrency, durability, revisions, watch)
// are the Driver's to keep: every method is safe for concurrent use; a write
// that returns nil is durable; a write that fails changed nothing.
type Driver interface {
	// Create makes a session at revision req.Revision (1 or more; New's
	// Create sets it) holding msgs.Prepared, with msgs.Tally and
	// req.ExpireAfter. req.ID is
	// "" (the driver draws a new id, a UUIDv7 preferred) or a canonical UUID;
	// if that id exists, SameCreate decides between answering the existing
	// session (a retried create) and ErrAlreadyExists. Errors:
	// ErrAliasInUse, ErrAlreadyExists, ErrNoSpace.
	Create(ctx context.Context, req CreateRequest, msgs Messages) (*Session, error)

	// Get returns a session's metadata. Errors: ErrNotFound, ErrDataLoss.
	Get(ctx context.Context, ref Ref) (*Session, error)

	// Load returns the metadata and the messages opts selects (see
	// LoadOptions.Window, which does the arithmetic without overflow, and
	// ContextWindow for ViewContext, whose first message is the latest
	// compaction's summary) as one snapshot; an offset beyond the session
	// is an empty answer. Errors:
	// ErrNotFound, ErrDataLoss.
	Load(ctx context.Context, ref Ref, opts LoadOptions) (*Session, []*sessiondv1.Message, error)

	// List yields matching sessions in list order (UpdatedAt newest first,
	// then ID; opts.Model, when set, among Models), without locks held while yield runs, and stops at the first
	// error yield returns, returning it. The sessions it yields are
	// read-only: a driver may share them with its own index.
	List(ctx context.Context, opts ListOptions, yield func(*Session) error) error

	// Save replaces messages (msgs.Prepared, with msgs.Tally), title,
	// summary and metadata.
	// SameSave decides the no-op before CheckRevision. With
	// req.CreateIfMissing and no such session, it creates one (revision 1;
	// a non-zero ExpectedRevision is then ErrConflict). Errors: ErrNotFound,
	// ErrConflict, ErrAliasInUse, ErrNoSpace, ErrDataLoss.
	Save(ctx context.Context, req SaveRequest, msgs Messages) (*Session, error)

	// Append adds the batch's messages not yet stored, atomically. Under
	// the session's lock (or in its transaction) it reads the stored
	// messages with the ids of msgs.SentIDs and calls CheckAppend, which
	// skips those already stored, refuses a stored id with other content
	// (ErrMessageConflict), checks the expected revision (ErrConflict) and
	// applies the pairing rule (ErrInvalid); the Driver stores the
	// NewMessages it returns, with their tally, and answers their number
	// in AppendResult.Appended. Errors: ErrNotFound, ErrConflict,
	// ErrMessageConflict, ErrInvalid, ErrNoSpace, ErrDataLoss.
	Append(ctx context.Context, req AppendRequest, msgs Messages) (AppendResult, error)

	// Update changes the fields req.Fields names; ApplyUpdate computes the
	// new metadata and whether anything changed (the no-op check comes
	// before CheckRevision). Errors: ErrNotFound, ErrConflict, ErrAliasInUse,
	// ErrNoSpace.
	Update(ctx context.Context, req UpdateRequest) (*Session, error)

	// Delete removes a session. Errors: ErrNotFound, ErrConflict.
	Delete(ctx context.Context, ref Ref, expectedRevision uint64) error

	// Fork copies a session's first req.MessageCount messages (0 = all) into
	// a new session; CheckCount refuses a count beyond the session. The new
	// session's tally is Recount of the copied messages, its ExpireAfter the
	// source's. Errors:
	// ErrNotFound, ErrInvalid (from CheckCount), ErrAliasInUse, ErrNoSpace,
	// ErrDataLoss.
	Fork(ctx context.Context, req ForkRequest) (*Session, error)

	// Rewind keeps a session's first req.MessageCount messages; CheckCount
	// refuses a count beyond the session, and keeping every message is a
	// no-op before CheckRevision. The tally becomes Recount of the kept
	// messages. Errors: ErrNotFound, ErrConflict,
	// ErrInvalid (from CheckCount), ErrNoSpace, ErrDataLoss.
	Rewind(ctx context.Context, req RewindRequest) (*Session, error)

	// Search yields hits session by session in list order, and within a
	// session in message order (metadata hit first); a damaged session is
	// skipped.
	Search(ctx context.Context, opts SearchOptions, yield func(SearchHit) error) error

	// Watch subscribes to a session's changes after fromRevision (0 = from
	// now). Errors: ErrNotFound, ErrWatchReset.
	Watch(ctx context.Context, ref Ref, fromRevision uint64) (*Subscription, error)

	// Expired yields the sessions ExpiredOptions.Expires selects, in any
	// namespace and order, at most opts.Limit (0: all), without locks held
	// while yield runs.
	Expired(ctx context.Context, opts ExpiredOptions, yield func(*Session) error) error

	// Close releases the backend and ends every subscription with
	// ErrClosed. The Store calls it once, after the calls it admitted have
	// returned.
	Close() error

	// Compact stores a compaction: summary.Prepared[0] (encoded as
	// summary.Encoded[0]) stands for the messages up to and including
	// req.ThroughMessageID. Under the session's lock it finds that
	// message's index (ThroughNotFound if none) and calls CheckCompact,
	// which decides the no-op, the expected revision and the tool-call
	// boundary; then it appends the compaction to the session's list,
	// bumps the revision and publishes EventCompacted. Load's ViewContext
	// uses the latest of the list; Fork and Rewind keep KeepCompactions of
	// it; Save clears it. Errors: ErrNotFound, ErrInvalid, ErrConflict,
	// ErrNoSpace, ErrDataLoss.
	Compact(ctx context.Context, req CompactRequest, summary Messages) (*Session, error)
}

// Messages is a request's batch of messages as the Store hands it
// to a Driver: checked once, and prepared once.
type Messages struct {
	// Prepared are the messages to store, in order: Sent's messages, with a
	// copy for each that lacked an id (now a new UUID) or a created_at (now
	// the request's time). The Driver may keep them, and publish them in
	// events, and must not modify them.
	Prepared []*sessiondv1.Message
	// Encoded are Prepared's protobuf encodings, one per message, made once
	// by the Store (proto.Marshal). Read only.
	Encoded [][]byte
	// Sent are the messages as the client sent them, for comparing a retry
	// with what is stored (SameMessage ignores a created_at the client left
	// unset). Read only.
	Sent []*sessiondv1.Message
	// Tally is, for a create or a save, the tally of Prepared as a whole
	// session (Count, which has applied the pairing rule). For an append
	// it is unset: CheckAppend computes the session's new tally under the
	// Driver's lock.
	Tally Tally
}

// SentIDs returns the ids the client chose, in batch order: the only ids of
// the batch that can already be stored. A Driver reads the stored messages
// with these ids before calling CheckAppend.
func (m Messages) SentIDs() []string {
	ids := make([]string, 0, len(m.Sent))
	for _, s := range m.Sent {
		if id := s.GetId(); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// StoredFunc looks up the message with a given id in the session a write is
// about: the stored message and true, or false when the session holds no
// message with that id. An error (ErrDataLoss for a stored message that does
// not decode) ends the check with that error.
type StoredFunc func(id string) (*sessiondv1.Message, bool, error)

// NewMessages is what CheckAppend found an append must store.
type NewMessages struct {
	// Prepared are the batch's messages not yet stored, in batch order
	// (taken from Messages.Prepared); empty when the append is a no-op.
	Prepared []*sessiondv1.Message
	// Encoded are their encodings (from Messages.Encoded).
	Encoded [][]byte
	// Positions holds each one's index in the batch, ascending; nil when
	// every message of the batch is new.
	Positions []int
	// Tally is the session's tally once they are appended.
	Tally Tally
}

// CheckAppend applies the idempotent-append rule to msgs against a session
// whose id is sessionID, whose revision is revision and whose tally is
// tally:
//
//   - a message whose id is stored with the same content (SameMessage) is
//     already there and is skipped; the rest are new;
//   - a stored id with other content: ErrMessageConflict naming the
//     message, and nothing is appended;
//   - no new message: a no-op; it returns an empty NewMessages and the
//     Driver answers the session's current revision and count, changing
//     nothing;
//   - otherwise CheckRevision(sessionID, expected, revision), so a stale
//     expected revision is ErrConflict, then Tally.Add over the new
//     messages, which applies the pairing rule (ErrInvalid naming the
//     message by its index in the batch).
//
// The Driver appends the returned messages in order, bumping the revision
// once. The classification comes before the revision check, so a retry of
// an append that landed (whole or in part) succeeds. stored is called only
// for the ids the client chose.
func CheckAppend(sessionID string, msgs Messages, expected, revision uint64, tally Tally, stored StoredFunc) (NewMessages, error) {
	var out NewMessages
	skipped, fresh := false, 0
	for i, m := range msgs.Sent {
		if id := m.GetId(); id != "" {
			s, ok, err := stored(id)
			if err != nil {
				return NewMessages{}, err
			}
			if ok {
				if !SameMessage(s, m) {
					return NewMessages{}, fmt.Errorf("messages[%d].id %q is in session %s with other content: %w", i, msgcheck.Clip(id), sessionID, ErrMessageConflict)
				}
				if !skipped { // the messages before i were all new
					skipped = true
					out.Positions = make([]int, i, len(msgs.Sent)-1)
					for k := range i {
						out.Positions[k] = k
					}
				}
				continue
			}
		}
		fresh++
		if skipped {
			out.Positions = append(out.Positions, i)
		}
	}
	if fresh == 0 {
		return NewMessages{}, nil
	}
	if err := CheckRevision(sessionID, expected, revision); err != nil {
		return NewMessages{}, err
	}
	out.Prepared, out.Encoded = msgs.Prepared, msgs.Encoded
	if skipped {
		out.Prepared = make([]*sessiondv1.Message, len(out.Positions))
		out.Encoded = make([][]byte, len(out.Positions))
		for k, i := range out.Positions {
			out.Prepared[k], out.Encoded[k] = msgs.Prepared[i], msgs.Encoded[i]
		}
	}
	var err error
	if out.Tally, err = tally.Add("messages", out.Prepared); err != nil {
		if skipped {
			err = inBatch(err, "messages", out.Positions)
		}
		return NewMessages{}, err
	}
	return out, nil
}

// inBatch renames the field of a *FieldError about field[k] (an index into
// the new messages) to the message's index in the batch, positions[k].
func inBatch(err error, field string, positions []int) error {
	return renameField(err, func(f string) string {
		rest, ok := strings.CutPrefix(f, field+"[")
		num, rest, found := strings.Cut(rest, "]")
		k, perr := strconv.Atoi(num)
		if !ok || !found || perr != nil || k < 0 || k >= len(positions) {
			return f
		}
		return fmt.Sprintf("%s[%d]%s", field, positions[k], rest)
	})
}

// CheckRevision returns ErrConflict when expected is not zero and differs
// from the session's current revision.
func CheckRevision(sessionID string, expected, current uint64) error {
	if expected != 0 && expected != current {
		return fmt.Errorf("session %s is at revision %d, expected %d: %w", sessionID, current, expected, ErrConflict)
	}
	return nil
}

// CheckCount refuses a fork or rewind message_count beyond the session's
// messages (ErrInvalid naming message_count).
func CheckCount(sessionID string, count, have int64) error {
	if count > have {
		return Invalid("message_count", "%d is more than the %d messages of session %s", count, have, sessionID)
	}
	return nil
}

// AliasInUse is the ErrAliasInUse a Driver returns when another session of
// namespace has alias.
func AliasInUse(namespace, alias string) error {
	return fmt.Errorf("alias %q is taken by another session in %s: %w", alias, DescribeNamespace(namespace), ErrAliasInUse)
}

// DescribeNamespace names a namespace in a message: "the default namespace"
// or namespace "NS".
func DescribeNamespace(ns string) string {
	if ns == "" {
		return "the default namespace"
	}
	return fmt.Sprintf("namespace %q", ns)
}

// LoadStreamer is implemented by Drivers that can hand out a load's
// messages one at a time from a consistent snapshot, without decoding them
// all first (see Store.LoadStream). The Store uses it when the
// Driver has it, and Load otherwise. opts are valid, as for Load.
type LoadStreamer interface {
	LoadStream(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) error
}

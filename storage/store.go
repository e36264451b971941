package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Store is a session store: what the server calls, over a backend's Driver
// (see New, or a backend's Open). See the package doc for the contracts
// every method keeps.
//
// It holds every rule that does not need the stored state, so that no
// backend codes them again: it checks each request once (ErrInvalid as a
// *FieldError naming the field, ErrTooLarge as a *LimitError naming the
// limit), prepares messages (ids and created_at filled in), adds the
// synthetic tool results a load asks for, and calls the Driver only with
// valid requests.
//
// # Concurrency
//
// Every method is safe for concurrent use. A call whose context has ended
// returns the context's error before it reaches the Driver. Close lets the
// calls in progress finish (including a List, Search, Expired or
// LoadStream still calling back) before it closes the Driver; once Close
// has begun, every method returns ErrClosed. A callback may call the Store
// again.
type Store struct {
	d   Driver
	lim Limits

	// mu guards closed and orders every calls.Add before Close's Wait.
	// Calls share it (RLock), so that concurrent calls do not queue on it;
	// only Close takes it exclusively.
	mu     sync.RWMutex
	closed bool
	calls  sync.WaitGroup // calls in progress

	closeOnce sync.Once
	closeErr  error
}

// New returns the Store over a backend's Driver. Zero fields of limits
// take DefaultLimits' values. Closing the Store closes the Driver.
func New(d Driver, limits Limits) *Store {
	def := DefaultLimits()
	for _, f := range []struct{ v, d *int64 }{
		{&limits.MaxMessageBytes, &def.MaxMessageBytes}, {&limits.MaxFrameBytes, &def.MaxFrameBytes},
		{&limits.MaxTitleBytes, &def.MaxTitleBytes}, {&limits.MaxSummaryBytes, &def.MaxSummaryBytes},
		{&limits.MaxMapEntries, &def.MaxMapEntries}, {&limits.MaxMapKeyBytes, &def.MaxMapKeyBytes},
		{&limits.MaxMapValueBytes, &def.MaxMapValueBytes}, {&limits.MaxSessionBytes, &def.MaxSessionBytes},
		{&limits.MaxQueryBytes, &def.MaxQueryBytes},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return &Store{d: d, lim: limits}
}

// messages checks and prepares a request's messages. When whole is set
// they are a session's whole messages (a create or save): their tally is
// counted here, applying the pairing rule; an append's is the Driver's to
// count against the stored session.
func (s *Store) messages(field string, sent []*sessiondv1.Message, whole bool) (Messages, error) {
	prepared, encoded, err := s.lim.PrepareMessages(field, sent, time.Now().UTC(), whole)
	if err != nil {
		return Messages{}, err
	}
	if err := s.refuseOpenUnlessLive(field, prepared); err != nil {
		return Messages{}, err
	}
	msgs := Messages{Prepared: prepared, Encoded: encoded, Sent: sent}
	if whole {
		if msgs.Tally, err = Count(field, prepared); err != nil {
			return Messages{}, err
		}
	}
	return msgs, nil
}

func notNegative(field string, v int64) error {
	if v < 0 {
		return Invalid(field, "is %d; it must not be negative", v)
	}
	return nil
}

func optionalAlias(field, alias string) error {
	if alias == "" {
		return nil
	}
	return InField(field, ValidateAlias(alias))
}

func (s *Store) sessionFields(title, summary string, metadata, labels map[string]string) error {
	return firstErr(s.lim.CheckTitle("title", title), s.lim.CheckSummary("summary", summary),
		s.lim.CheckMap("metadata", metadata), s.lim.CheckMap("labels", labels))
}

// firstErr returns the first error that is not nil: one field is named.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Create makes a session with revision 1 (or req.Revision). Errors: ErrInvalid,
// ErrAliasInUse, ErrAlreadyExists, ErrNoSpace.
func (s *Store) Create(ctx context.Context, req CreateRequest) (*Session, error) {
	return call(ctx, s, nil, func() (*Session, error) { return s.create(ctx, req) })
}

func (s *Store) create(ctx context.Context, req CreateRequest) (*Session, error) {
	if err := ValidateNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if err := optionalAlias("", req.Alias); err != nil {
		return nil, err
	}
	if req.ID != "" {
		id, err := ParseSessionID("id", req.ID)
		if err != nil {
			return nil, err
		}
		req.ID = id
	}
	if err := s.sessionFields(req.Title, req.Summary, req.Metadata, req.Labels); err != nil {
		return nil, err
	}
	if req.Parent != nil {
		id, err := ParseSessionID("parent.session_id", req.Parent.SessionID)
		if err != nil {
			return nil, err
		}
		if err := notNegative("parent.message_count", req.Parent.MessageCount); err != nil {
			return nil, err
		}
		req.Parent = &ForkOrigin{SessionID: id, MessageCount: req.Parent.MessageCount}
	}
	if err := ValidateExpireAfter("expire_after", req.ExpireAfter); err != nil {
		return nil, err
	}
	if req.Revision > MaxStartRevision {
		return nil, Invalid("revision", "is %d; the most a new session may start at is %d", req.Revision, uint64(MaxStartRevision))
	}
	req.Revision = max(req.Revision, 1)
	msgs, err := s.messages("messages", req.Messages, true)
	if err != nil {
		return nil, err
	}
	req.Messages = nil
	req.Title, req.TitleDerived = titleOf(req.Title, msgs.Prepared)
	return s.d.Create(ctx, req, msgs)
}

// Get returns a session's metadata. Errors: ErrNotFound, ErrDataLoss.
func (s *Store) Get(ctx context.Context, ref Ref) (*Session, error) {
	return call(ctx, s, &ref, func() (*Session, error) { return s.d.Get(ctx, ref) })
}

// Load returns a session's metadata and the messages opts selects, as one
// consistent snapshot. Errors: ErrNotFound, ErrInvalid, ErrDataLoss.
func (s *Store) Load(ctx context.Context, ref Ref, opts LoadOptions) (sess *Session, msgs []*sessiondv1.Message, err error) {
	err = run(ctx, s, &ref, func() error {
		if err := checkLoad(opts); err != nil {
			return err
		}
		if !opts.CloseOpenToolCalls {
			var err error
			sess, msgs, err = s.d.Load(ctx, ref, opts)
			return err
		}
		return s.loadClosing(ctx, ref, opts, func(s *Session) error {
			sess = s
			return nil
		}, func(m *sessiondv1.Message) error {
			msgs = append(msgs, m)
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return sess, msgs, nil
}

// LoadStream is Load handing the answer out piece by piece, from the
// same consistent snapshot: start gets the metadata, then each gets the
// selected messages in order, decoded one at a time, so that a slow
// reader holds one message rather than the whole session. It stops at
// the first error start or each returns, and returns it. Errors as
// Load's.
func (s *Store) LoadStream(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) error {
	return run(ctx, s, &ref, func() error {
		if err := checkLoad(opts); err != nil {
			return err
		}
		return s.loadClosing(ctx, ref, opts, start, each)
	})
}

// loadClosing streams a load of a valid ref, adding the synthetic tool
// results opts.CloseOpenToolCalls asks for.
func (s *Store) loadClosing(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) (err error) {
	if opts.CloseOpenToolCalls {
		// The session's open calls, from the same snapshot as the messages,
		// say which assistant messages get synthetic results.
		opts.CloseOpenToolCalls = false
		var c *toolCallCloser
		outerStart, inner := start, each
		start, each = func(s *Session) error {
			c = newToolCallCloser(s.OpenToolCallIDs)
			return outerStart(s)
		}, func(m *sessiondv1.Message) error {
			return c.next(m, inner)
		}
		defer func() {
			if err == nil && c != nil {
				err = c.flush(inner)
			}
		}()
	}
	return s.loadStream(ctx, ref, opts, start, each)
}

func (s *Store) loadStream(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) error {
	if ls, ok := s.d.(LoadStreamer); ok {
		return ls.LoadStream(ctx, ref, opts, start, each)
	}
	sess, msgs, err := s.d.Load(ctx, ref, opts)
	if err != nil {
		return err
	}
	if err := start(sess); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := each(m); err != nil {
			return err
		}
	}
	return nil
}

func checkLoad(opts LoadOptions) error {
	err := firstErr(notNegative("offset", opts.Offset), notNegative("limit", opts.Limit))
	if err == nil && opts.Tail && opts.Offset != 0 {
		err = Invalid("offset", "is %d with tail set; tail counts from the end, so offset must be 0", opts.Offset)
	}
	if err == nil && opts.View > ViewContext {
		err = Invalid("view", "is %d, which is no view this daemon knows", opts.View)
	}
	return err
}

// List calls yield for each matching session, newest-updated first, then
// by ID; it stops at the first error yield returns and returns it. yield
// runs without store locks held, so it may be slow; it must not modify the
// session (or its maps and slices), which the driver may share with its
// index. Errors: ErrInvalid.
func (s *Store) List(ctx context.Context, opts ListOptions, yield func(*Session) error) error {
	return run(ctx, s, nil, func() error {
		if err := s.checkList(opts); err != nil {
			return err
		}
		return s.d.List(ctx, opts, yield)
	})
}

// checkList validates a listing's options.
func (s *Store) checkList(opts ListOptions) error {
	return firstErr(ValidateNamespace(opts.Namespace), ValidateAliasPrefix("alias_prefix", opts.AliasPrefix),
		s.lim.CheckMap("labels", opts.Labels), notNegative("limit", opts.Limit), ValidateModel("model", opts.Model))
}

// Save replaces a session's messages, title, summary and metadata
// atomically (alias and labels are kept). Errors: ErrNotFound,
// ErrConflict, ErrInvalid, ErrAliasInUse (CreateIfMissing), ErrNoSpace,
// ErrDataLoss.
func (s *Store) Save(ctx context.Context, req SaveRequest) (*Session, error) {
	return call(ctx, s, &req.Ref, func() (*Session, error) { return s.save(ctx, req) })
}

func (s *Store) save(ctx context.Context, req SaveRequest) (*Session, error) {
	if err := s.sessionFields(req.Title, req.Summary, req.Metadata, nil); err != nil {
		return nil, err
	}
	msgs, err := s.messages("messages", req.Messages, true)
	if err != nil {
		return nil, err
	}
	req.Messages = nil
	req.Title, req.TitleDerived = titleOf(req.Title, msgs.Prepared)
	return s.d.Save(ctx, req, msgs)
}

// Append adds the batch's messages not already stored (see the package
// doc), atomically. It fills a missing message id with a new UUID and a
// missing created_at with the current time. Errors:
// ErrNotFound, ErrConflict, ErrMessageConflict, ErrInvalid, ErrNoSpace,
// ErrDataLoss.
func (s *Store) Append(ctx context.Context, req AppendRequest) (AppendResult, error) {
	return call(ctx, s, &req.Ref, func() (AppendResult, error) {
		if len(req.Messages) == 0 {
			return AppendResult{}, Invalid("messages", "is empty; an append needs at least one")
		}
		msgs, err := s.messages("messages", req.Messages, false)
		if err != nil {
			return AppendResult{}, err
		}
		req.Messages = nil
		return s.d.Append(ctx, req, msgs)
	})
}

// updateFields is every field Update knows.
const updateFields = UpdateAlias | UpdateTitle | UpdateSummary | UpdateMetadata | UpdateLabels | UpdateExpireAfter

// CheckUpdateFields checks an update's field set (its update_mask): at least
// one field, and only known ones.
func CheckUpdateFields(f UpdateField) error {
	if f == 0 {
		return Invalid("update_mask", "is empty; name at least one of alias, title, summary, metadata, labels, expire_after")
	}
	if f&updateFields != f {
		return Invalid("update_mask", "names unknown fields %#x", f&^updateFields)
	}
	return nil
}

// Update changes the selected metadata fields. Errors: ErrNotFound,
// ErrConflict, ErrAliasInUse, ErrInvalid, ErrNoSpace.
func (s *Store) Update(ctx context.Context, req UpdateRequest) (*Session, error) {
	return call(ctx, s, &req.Ref, func() (*Session, error) { return s.update(ctx, req) })
}

func (s *Store) update(ctx context.Context, req UpdateRequest) (*Session, error) {
	if err := CheckUpdateFields(req.Fields); err != nil {
		return nil, err
	}
	// Only the fields named are checked: the others are ignored.
	f := req.Fields
	err := firstErr(
		when(f&UpdateAlias != 0, func() error { return optionalAlias("", req.Alias) }),
		when(f&UpdateTitle != 0, func() error { return s.lim.CheckTitle("title", req.Title) }),
		when(f&UpdateSummary != 0, func() error { return s.lim.CheckSummary("summary", req.Summary) }),
		when(f&UpdateMetadata != 0, func() error { return s.lim.CheckMap("metadata", req.Metadata) }),
		when(f&UpdateLabels != 0, func() error { return s.lim.CheckMap("labels", req.Labels) }),
		when(f&UpdateExpireAfter != 0, func() error { return ValidateExpireAfter("expire_after", req.ExpireAfter) }))
	if err != nil {
		return nil, err
	}
	return s.d.Update(ctx, req)
}

// Delete removes a session. Errors: ErrNotFound, ErrConflict.
func (s *Store) Delete(ctx context.Context, ref Ref, expectedRevision uint64) error {
	return run(ctx, s, &ref, func() error { return s.d.Delete(ctx, ref, expectedRevision) })
}

// Fork copies a session into a new one. Errors: ErrNotFound, ErrInvalid
// (MessageCount beyond the session), ErrAliasInUse, ErrNoSpace, ErrDataLoss.
func (s *Store) Fork(ctx context.Context, req ForkRequest) (*Session, error) {
	return call(ctx, s, &req.Ref, func() (*Session, error) {
		if err := firstErr(notNegative("message_count", req.MessageCount), optionalAlias("", req.Alias),
			s.lim.CheckTitle("title", req.Title)); err != nil {
			return nil, err
		}
		return s.d.Fork(ctx, req)
	})
}

// Rewind keeps a session's first messages. Errors: ErrNotFound,
// ErrConflict, ErrInvalid (MessageCount beyond the session), ErrNoSpace,
// ErrDataLoss.
func (s *Store) Rewind(ctx context.Context, req RewindRequest) (*Session, error) {
	return call(ctx, s, &req.Ref, func() (*Session, error) {
		if err := notNegative("message_count", req.MessageCount); err != nil {
			return nil, err
		}
		return s.d.Rewind(ctx, req)
	})
}

// Search calls yield for each hit, session by session in list order and
// within a session in message order (metadata hit first); it stops at the
// first error yield returns. A damaged session is skipped. Errors: ErrInvalid.
func (s *Store) Search(ctx context.Context, opts SearchOptions, yield func(SearchHit) error) error {
	return run(ctx, s, nil, func() error {
		if opts.Query == "" {
			return Invalid("query", "is empty")
		}
		if err := firstErr(ValidateNamespace(opts.Namespace), s.lim.CheckQuery("query", opts.Query),
			notNegative("limit", opts.Limit)); err != nil {
			return err
		}
		return s.d.Search(ctx, opts, yield)
	})
}

// Watch subscribes to a session's changes after fromRevision (0 = from
// now). The subscription's first events replay the kept history after
// fromRevision. Errors: ErrNotFound, ErrWatchReset (fromRevision older
// than the history kept, or newer than the session).
func (s *Store) Watch(ctx context.Context, ref Ref, fromRevision uint64) (*Subscription, error) {
	return call(ctx, s, &ref, func() (*Subscription, error) { return s.d.Watch(ctx, ref, fromRevision) })
}

// Expired calls yield for each session, in any namespace, that has not
// been updated for its idle time to live as of opts.Now: its own
// ExpireAfter, else opts.Defaults[namespace]; it stops at the first
// error yield returns. Errors: ErrInvalid.
func (s *Store) Expired(ctx context.Context, opts ExpiredOptions, yield func(*Session) error) error {
	return run(ctx, s, nil, func() error {
		if err := notNegative("limit", opts.Limit); err != nil {
			return err
		}
		if opts.Now.IsZero() {
			return Invalid("now", "is unset")
		}
		for ns, d := range opts.Defaults {
			if err := ValidateNamespace(ns); err != nil {
				return err
			}
			if err := ValidateExpireAfter(fmt.Sprintf("defaults[%q]", ns), d); err != nil {
				return err
			}
		}
		return s.d.Expired(ctx, opts, yield)
	})
}

// Close refuses new calls (they return ErrClosed), waits for the calls in
// progress to return, then closes the Driver, which ends every
// subscription with ErrClosed. Later calls return the first's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.calls.Wait()
		s.closeErr = s.d.Close()
	})
	return s.closeErr
}

// call runs fn as an admitted call of s, which Close waits for: it
// returns ErrClosed once Close has begun and the context's error if it has
// ended. When ref is not nil, it is validated first and replaced by its
// canonical form.
func call[T any](ctx context.Context, s *Store, ref *Ref, fn func() (T, error)) (T, error) {
	var zero T
	if err := s.enter(ctx); err != nil {
		return zero, err
	}
	defer s.calls.Done()
	if ref != nil {
		valid, err := ValidateRef(*ref)
		if err != nil {
			return zero, err
		}
		*ref = valid
	}
	return fn()
}

// run is call for a method that returns only an error.
func run(ctx context.Context, s *Store, ref *Ref, fn func() error) error {
	_, err := call(ctx, s, ref, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// enter admits a call (see call).
func (s *Store) enter(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.calls.Add(1)
	return nil
}

// Limits returns the limits the store enforces.
func (s *Store) Limits() Limits { return s.lim }

// when runs check if cond holds.
func when(cond bool, check func() error) error {
	if cond {
		return check()
	}
	return nil
}

// ValidateAliasPrefix checks a listing's alias prefix: any prefix of a valid
// alias (the alias characters, at most MaxNameBytes); "" matches all.
func ValidateAliasPrefix(field, prefix string) error {
	if len(prefix) > MaxNameBytes {
		return Invalid(field, "is %d bytes, more than %d", len(prefix), MaxNameBytes)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; !nameByte(c) {
			return Invalid(field, "has byte %q at %d, which no alias holds", c, i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Stats describes the backend's state for monitoring (see StatsReporter).
// It fails with an error wrapping errors.ErrUnsupported when the backend
// keeps no statistics, and with ErrClosed once Close has begun.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	return call(ctx, s, nil, func() (Stats, error) {
		r, ok := s.d.(StatsReporter)
		if !ok {
			return Stats{}, fmt.Errorf("storage: the backend keeps no statistics: %w", errors.ErrUnsupported)
		}
		return r.Stats(ctx)
	})
}

// Ping says whether the backend can serve calls now: ErrUnavailable while
// its database is unreachable. A backend with no connection to lose (see
// Pinger) always answers nil while the store is open.
func (s *Store) Ping(ctx context.Context) error {
	return run(ctx, s, nil, func() error {
		if p, ok := s.d.(Pinger); ok {
			return p.Ping(ctx)
		}
		return nil
	})
}

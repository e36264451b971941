package storage

import (
	"context"
	"fmt"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// New returns the portable Store over a backend's Driver: it checks every
// request once (ErrInvalid as a *FieldError naming the field, ErrTooLarge as
// a *LimitError naming the limit), prepares messages, and calls the Driver
// only with valid requests. Zero fields of limits take DefaultLimits' values.
// Closing the Store closes the Driver.
func New(d Driver, limits Limits) Store {
	def := DefaultLimits()
	for _, f := range []struct{ v, d *int64 }{
		{&limits.MaxMessageBytes, &def.MaxMessageBytes}, {&limits.MaxFrameBytes, &def.MaxFrameBytes},
		{&limits.MaxTitleBytes, &def.MaxTitleBytes}, {&limits.MaxSummaryBytes, &def.MaxSummaryBytes},
		{&limits.MaxMapEntries, &def.MaxMapEntries}, {&limits.MaxMapKeyBytes, &def.MaxMapKeyBytes},
		{&limits.MaxMapValueBytes, &def.MaxMapValueBytes}, {&limits.MaxSessionBytes, &def.MaxSessionBytes},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return &portable{d: d, lim: limits}
}

// portable is the Store New returns.
type portable struct {
	d   Driver
	lim Limits
}

// messages checks and prepares a request's messages. When whole is set
// they are a session's whole messages (a create or save): their tally is
// counted here, applying the pairing rule; an append's is the Driver's to
// count against the stored session.
func (p *portable) messages(field string, sent []*sessiondv1.Message, whole bool) (Messages, error) {
	prepared, encoded, err := p.lim.PrepareMessages(field, sent, time.Now().UTC(), whole)
	if err != nil {
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

func (p *portable) sessionFields(title, summary string, metadata, labels map[string]string) error {
	return firstErr(p.lim.CheckTitle("title", title), p.lim.CheckSummary("summary", summary),
		p.lim.CheckMap("metadata", metadata), p.lim.CheckMap("labels", labels))
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

func (p *portable) Create(ctx context.Context, req CreateRequest) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
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
	if err := p.sessionFields(req.Title, req.Summary, req.Metadata, req.Labels); err != nil {
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
	msgs, err := p.messages("messages", req.Messages, true)
	if err != nil {
		return nil, err
	}
	req.Messages = nil
	return p.d.Create(ctx, req, msgs)
}

func (p *portable) Get(ctx context.Context, ref Ref) (*Session, error) {
	ref, err := ValidateRef(ref)
	if err != nil {
		return nil, err
	}
	return p.d.Get(ctx, ref)
}

func (p *portable) Load(ctx context.Context, ref Ref, opts LoadOptions) (*Session, []*sessiondv1.Message, error) {
	ref, err := validLoad(ref, opts)
	if err != nil {
		return nil, nil, err
	}
	if !opts.CloseOpenToolCalls {
		return p.d.Load(ctx, ref, opts)
	}
	var (
		sess *Session
		msgs []*sessiondv1.Message
	)
	err = p.LoadStream(ctx, ref, opts, func(s *Session) error {
		sess = s
		return nil
	}, func(m *sessiondv1.Message) error {
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return sess, msgs, nil
}

func (p *portable) LoadStream(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) (err error) {
	ref, err = validLoad(ref, opts)
	if err != nil {
		return err
	}
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
	return p.loadStream(ctx, ref, opts, start, each)
}

func (p *portable) loadStream(ctx context.Context, ref Ref, opts LoadOptions, start func(*Session) error, each func(*sessiondv1.Message) error) error {
	if ls, ok := p.d.(LoadStreamer); ok {
		return ls.LoadStream(ctx, ref, opts, start, each)
	}
	sess, msgs, err := p.d.Load(ctx, ref, opts)
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

func validLoad(ref Ref, opts LoadOptions) (Ref, error) {
	ref, err := ValidateRef(ref)
	if err == nil {
		err = firstErr(notNegative("offset", opts.Offset), notNegative("limit", opts.Limit))
	}
	if err == nil && opts.Tail && opts.Offset != 0 {
		err = Invalid("offset", "is %d with tail set; tail counts from the end, so offset must be 0", opts.Offset)
	}
	return ref, err
}

func (p *portable) List(ctx context.Context, opts ListOptions, yield func(*Session) error) error {
	if err := p.checkList(opts); err != nil {
		return err
	}
	return p.d.List(ctx, opts, yield)
}

// checkList validates a listing's options.
func (p *portable) checkList(opts ListOptions) error {
	return firstErr(ValidateNamespace(opts.Namespace), ValidateAliasPrefix("alias_prefix", opts.AliasPrefix),
		p.lim.CheckMap("labels", opts.Labels), notNegative("limit", opts.Limit), ValidateModel("model", opts.Model))
}

func (p *portable) Save(ctx context.Context, req SaveRequest) (*Session, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	req.Ref = ref
	if err := p.sessionFields(req.Title, req.Summary, req.Metadata, nil); err != nil {
		return nil, err
	}
	msgs, err := p.messages("messages", req.Messages, true)
	if err != nil {
		return nil, err
	}
	req.Messages = nil
	return p.d.Save(ctx, req, msgs)
}

func (p *portable) Append(ctx context.Context, req AppendRequest) (AppendResult, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return AppendResult{}, err
	}
	req.Ref = ref
	if len(req.Messages) == 0 {
		return AppendResult{}, Invalid("messages", "is empty; an append needs at least one")
	}
	msgs, err := p.messages("messages", req.Messages, false)
	if err != nil {
		return AppendResult{}, err
	}
	req.Messages = nil
	return p.d.Append(ctx, req, msgs)
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

func (p *portable) Update(ctx context.Context, req UpdateRequest) (*Session, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	req.Ref = ref
	if err := CheckUpdateFields(req.Fields); err != nil {
		return nil, err
	}
	// Only the fields named are checked: the others are ignored.
	f := req.Fields
	err = firstErr(
		when(f&UpdateAlias != 0, func() error { return optionalAlias("", req.Alias) }),
		when(f&UpdateTitle != 0, func() error { return p.lim.CheckTitle("title", req.Title) }),
		when(f&UpdateSummary != 0, func() error { return p.lim.CheckSummary("summary", req.Summary) }),
		when(f&UpdateMetadata != 0, func() error { return p.lim.CheckMap("metadata", req.Metadata) }),
		when(f&UpdateLabels != 0, func() error { return p.lim.CheckMap("labels", req.Labels) }),
		when(f&UpdateExpireAfter != 0, func() error { return ValidateExpireAfter("expire_after", req.ExpireAfter) }))
	if err != nil {
		return nil, err
	}
	return p.d.Update(ctx, req)
}

func (p *portable) Delete(ctx context.Context, ref Ref, expectedRevision uint64) error {
	ref, err := ValidateRef(ref)
	if err != nil {
		return err
	}
	return p.d.Delete(ctx, ref, expectedRevision)
}

func (p *portable) Fork(ctx context.Context, req ForkRequest) (*Session, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	req.Ref = ref
	if err := firstErr(notNegative("message_count", req.MessageCount), optionalAlias("", req.Alias),
		p.lim.CheckTitle("title", req.Title)); err != nil {
		return nil, err
	}
	return p.d.Fork(ctx, req)
}

func (p *portable) Rewind(ctx context.Context, req RewindRequest) (*Session, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	req.Ref = ref
	if err := notNegative("message_count", req.MessageCount); err != nil {
		return nil, err
	}
	return p.d.Rewind(ctx, req)
}

func (p *portable) Search(ctx context.Context, opts SearchOptions, yield func(SearchHit) error) error {
	if opts.Query == "" {
		return Invalid("query", "is empty")
	}
	if err := firstErr(ValidateNamespace(opts.Namespace), p.lim.CheckTitle("query", opts.Query),
		notNegative("limit", opts.Limit)); err != nil {
		return err
	}
	return p.d.Search(ctx, opts, yield)
}

func (p *portable) Watch(ctx context.Context, ref Ref, fromRevision uint64) (*Subscription, error) {
	ref, err := ValidateRef(ref)
	if err != nil {
		return nil, err
	}
	return p.d.Watch(ctx, ref, fromRevision)
}

func (p *portable) Expired(ctx context.Context, opts ExpiredOptions, yield func(*Session) error) error {
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
	return p.d.Expired(ctx, opts, yield)
}

func (p *portable) Close() error { return p.d.Close() }

func (p *portable) Limits() Limits { return p.lim }

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

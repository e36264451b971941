package storage

import (
	"context"
	"errors"
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

func (p *portable) messages(field string, sent []*sessiondv1.Message, maxTotal int64) (Messages, error) {
	prepared, err := p.lim.PrepareMessages(field, sent, time.Now().UTC(), maxTotal)
	if err != nil {
		return Messages{}, err
	}
	return Messages{Prepared: prepared, Sent: sent}, nil
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
	return errors.Join(p.lim.CheckTitle("title", title), p.lim.CheckSummary("summary", summary),
		p.lim.CheckMap("metadata", metadata), p.lim.CheckMap("labels", labels))
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
		if err := ValidateText("parent.session_id", req.Parent.SessionID); err != nil {
			return nil, err
		}
		if err := notNegative("parent.message_count", req.Parent.MessageCount); err != nil {
			return nil, err
		}
	}
	msgs, err := p.messages("messages", req.Messages, p.lim.MaxSessionBytes)
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
	ref, err := ValidateRef(ref)
	if err == nil {
		err = errors.Join(notNegative("offset", opts.Offset), notNegative("limit", opts.Limit))
	}
	if err == nil && opts.Tail && opts.Offset != 0 {
		err = Invalid("offset", "is %d; a tail load takes no offset", opts.Offset)
	}
	if err != nil {
		return nil, nil, err
	}
	return p.d.Load(ctx, ref, opts)
}

func (p *portable) List(ctx context.Context, opts ListOptions, yield func(*Session) error) error {
	err := errors.Join(ValidateNamespace(opts.Namespace), ValidateAliasPrefix("alias_prefix", opts.AliasPrefix),
		p.lim.CheckMap("labels", opts.Labels), notNegative("limit", opts.Limit))
	if err != nil {
		return err
	}
	return p.d.List(ctx, opts, yield)
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
	msgs, err := p.messages("messages", req.Messages, p.lim.MaxSessionBytes)
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
	msgs, err := p.messages("messages", req.Messages, 0)
	if err != nil {
		return AppendResult{}, err
	}
	req.Messages = nil
	return p.d.Append(ctx, req, msgs)
}

// updateFields is every field Update knows.
const updateFields = UpdateAlias | UpdateTitle | UpdateSummary | UpdateMetadata | UpdateLabels

func (p *portable) Update(ctx context.Context, req UpdateRequest) (*Session, error) {
	ref, err := ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	req.Ref = ref
	if req.Fields == 0 {
		return nil, Invalid("update_mask", "is empty; name at least one of alias, title, summary, metadata, labels")
	}
	if req.Fields&updateFields != req.Fields {
		return nil, Invalid("update_mask", "names unknown fields %#x", req.Fields&^updateFields)
	}
	if err := p.sessionFields(req.Title, req.Summary, req.Metadata, req.Labels); err != nil {
		return nil, err
	}
	if req.Fields&UpdateAlias != 0 {
		if err := optionalAlias("", req.Alias); err != nil {
			return nil, err
		}
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
	if err := errors.Join(notNegative("message_count", req.MessageCount), optionalAlias("", req.Alias),
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
	if err := errors.Join(ValidateNamespace(opts.Namespace), p.lim.CheckTitle("query", opts.Query),
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

func (p *portable) Close() error { return p.d.Close() }

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

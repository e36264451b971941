package storage

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// checkMessages checks a batch of messages the way every write does and
// returns its encoded size: each message keeps msgcheck.Message's rules
// (not null, a known role, only valid UTF-8 strings, valid ids, a valid
// created_at) and is encoded within max_message_bytes; no id repeats.
func (l Limits) checkMessages(field string, msgs []*sessiondv1.Message) (int64, error) {
	var total int64
	var seen map[string]int // a lone message repeats no id
	if len(msgs) > 1 {
		seen = make(map[string]int, len(msgs))
	}
	// Field names are built only for an error: this runs on every append.
	at := func(i int) string { return fmt.Sprintf("%s[%d]", field, i) }
	for i, m := range msgs {
		// Every field msgcheck names starts with the field given, so the
		// message's own name is put in front of a fault's field.
		if f := msgcheck.Message("", m); f != nil {
			f.Field = at(i) + f.Field
			return 0, fromFault(f)
		}
		if id := m.GetId(); id != "" && seen != nil {
			if j, dup := seen[id]; dup {
				return 0, Invalid(at(i)+".id", "%q repeats %s[%d].id", clip(id), field, j)
			}
			seen[id] = i
		}
		n := int64(proto.Size(m))
		if n > l.MaxMessageBytes {
			return 0, &LimitError{Field: at(i), Limit: "max_message_bytes", Size: n, Max: l.MaxMessageBytes}
		}
		total += n
	}
	return total, nil
}

// fromFault turns a broken msgcheck rule into a *FieldError.
func fromFault(f *msgcheck.Fault) error {
	if f == nil {
		return nil
	}
	return &FieldError{Field: f.Field, Description: f.Description}
}

// PrepareMessages checks msgs with checkMessages and returns copies ready to
// store: a missing id becomes a new UUID and a missing created_at becomes
// now. When whole is set, msgs are a session's whole messages (a create or
// save), which max_session_bytes bounds. The caller's messages are not
// modified.
func (l Limits) PrepareMessages(field string, msgs []*sessiondv1.Message, now time.Time, whole bool) ([]*sessiondv1.Message, error) {
	total, err := l.checkMessages(field, msgs)
	if err != nil {
		return nil, err
	}
	if whole {
		if err := l.CheckSessionBytes(field, total); err != nil {
			return nil, err
		}
	}
	out := make([]*sessiondv1.Message, len(msgs))
	for i, m := range msgs {
		c := proto.Clone(m).(*sessiondv1.Message)
		if c.Id == "" {
			c.Id = uuid.NewString()
		}
		if c.CreatedAt == nil {
			c.CreatedAt = timestamppb.New(now)
		}
		out[i] = c
	}
	return out, nil
}

// SameMessage reports whether incoming, as a client sent it again, is the
// message stored: equal field for field (unknown fields included), ignoring
// created_at when the client left it for the server to fill in.
func SameMessage(stored, incoming *sessiondv1.Message) bool {
	if incoming.GetCreatedAt() == nil && stored.GetCreatedAt() != nil {
		c := proto.Clone(incoming).(*sessiondv1.Message)
		c.CreatedAt = stored.CreatedAt
		incoming = c
	}
	return proto.Equal(stored, incoming)
}

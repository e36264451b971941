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

// PrepareMessages checks msgs the way every write does and prepares them
// to store, looking at, measuring and encoding each message once: each
// keeps msgcheck's rules (not null, a known role, only valid UTF-8 strings,
// valid ids, a valid created_at), has at most max_map_entries metadata
// entries, is encoded within max_message_bytes, and repeats no id of the
// batch. A message without an id gets a new UUID and
// one without created_at gets now, in a copy: the caller's messages are not
// modified, and the others are used as they are (the caller must not
// modify them afterwards). It returns the messages to store and their
// protobuf encodings. When whole is set, msgs are a session's whole
// messages (a create or save), which max_session_bytes bounds.
func (l Limits) PrepareMessages(field string, msgs []*sessiondv1.Message, now time.Time, whole bool) (prepared []*sessiondv1.Message, encoded [][]byte, err error) {
	var seen map[string]int // a lone message repeats no id
	if len(msgs) > 1 {
		seen = make(map[string]int, len(msgs))
	}
	// Field names are built only for an error: this runs on every append.
	at := func(i int) string { return fmt.Sprintf("%s[%d]", field, i) }
	if len(msgs) == 1 {
		// Most appends hold one message: one allocation for both slices.
		one := new(struct {
			p [1]*sessiondv1.Message
			e [1][]byte
		})
		prepared, encoded = one.p[:], one.e[:]
	} else {
		prepared, encoded = make([]*sessiondv1.Message, len(msgs)), make([][]byte, len(msgs))
	}
	var total int64
	var created *timestamppb.Timestamp
	for i, m := range msgs {
		if m == nil {
			return nil, nil, Invalid(at(i), "is null")
		}
		// Every field msgcheck names starts with the field given, so the
		// message's own name is put in front of a fault's field.
		if f := msgcheck.Fields("", m); f != nil {
			f.Field = at(i) + f.Field
			return nil, nil, fromFault(f)
		}
		if n := int64(len(m.GetMetadata())); n > l.MaxMapEntries {
			return nil, nil, &LimitError{Field: at(i) + ".metadata", Limit: "max_map_entries", Size: n, Max: l.MaxMapEntries}
		}
		if id := m.GetId(); id != "" && seen != nil {
			if j, dup := seen[id]; dup {
				return nil, nil, Invalid(at(i)+".id", "%q repeats %s[%d].id", msgcheck.Clip(id), field, j)
			}
			seen[id] = i
		}
		p := m
		if m.GetId() == "" || m.GetCreatedAt() == nil {
			p = proto.Clone(m).(*sessiondv1.Message)
			if p.Id == "" {
				p.Id = uuid.NewString()
			}
			if p.CreatedAt == nil {
				if created == nil {
					created = timestamppb.New(now)
				}
				p.CreatedAt = created // read only, so shared by the batch
			}
		}
		b, err := proto.Marshal(p)
		if err != nil {
			if f := msgcheck.UTF8(at(i), m); f != nil {
				return nil, nil, fromFault(f)
			}
			return nil, nil, fmt.Errorf("encode %s: %w", at(i), err)
		}
		if n := int64(len(b)); n > l.MaxMessageBytes {
			return nil, nil, &LimitError{Field: at(i), Limit: "max_message_bytes", Size: n, Max: l.MaxMessageBytes}
		}
		total += int64(len(b))
		prepared[i], encoded[i] = p, b
	}
	if whole {
		if err := l.CheckSessionBytes(field, total); err != nil {
			return nil, nil, err
		}
	}
	return prepared, encoded, nil
}

// fromFault turns a broken msgcheck rule into a *FieldError.
func fromFault(f *msgcheck.Fault) error {
	if f == nil {
		return nil
	}
	return &FieldError{Field: f.Field, Description: f.Description}
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

package storage

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// PrepareMessages returns copies of msgs ready to store: a missing id becomes
// a new UUID and a missing created_at becomes now. It checks what every
// backend must refuse (ErrInvalid naming the field): an unspecified role, a
// bad message or tool-call id, and a message id used twice in the batch. The
// caller's messages are not modified.
func PrepareMessages(field string, msgs []*sessiondv1.Message, now time.Time) ([]*sessiondv1.Message, error) {
	out := make([]*sessiondv1.Message, len(msgs))
	seen := make(map[string]int, len(msgs))
	for i, m := range msgs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if m == nil {
			return nil, fmt.Errorf("%s is null: %w", f, ErrInvalid)
		}
		if m.GetRole() == sessiondv1.Role_ROLE_UNSPECIFIED {
			return nil, fmt.Errorf("%s.role is unspecified: %w", f, ErrInvalid)
		}
		if _, ok := sessiondv1.Role_name[int32(m.GetRole())]; !ok {
			return nil, fmt.Errorf("%s.role %d is not a known role: %w", f, m.GetRole(), ErrInvalid)
		}
		// Protobuf strings must be UTF-8; refuse here what would otherwise
		// fail (or panic) later, inside a backend's encoder.
		if path, bad := invalidUTF8(m.ProtoReflect()); bad {
			return nil, fmt.Errorf("%s.%s is not valid UTF-8: %w", f, path, ErrInvalid)
		}
		for j, tc := range m.GetToolCalls() {
			if err := ValidateMessageID(fmt.Sprintf("%s.tool_calls[%d].id", f, j), tc.GetId()); err != nil {
				return nil, err
			}
		}
		c := proto.Clone(m).(*sessiondv1.Message)
		if c.Id == "" {
			c.Id = uuid.NewString()
		} else if err := ValidateMessageID(f+".id", c.Id); err != nil {
			return nil, err
		}
		if j, dup := seen[c.Id]; dup {
			return nil, fmt.Errorf("%s.id %q repeats %s[%d].id: %w", f, c.Id, field, j, ErrInvalid)
		}
		seen[c.Id] = i
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

// invalidUTF8 finds the first string (field, list element, map key or value,
// nested ones included) of m that is not valid UTF-8 and returns its path.
func invalidUTF8(m protoreflect.Message) (path string, bad bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if p, ok := invalidUTF8Value(fd, l.Get(i)); ok {
					path, bad = fmt.Sprintf("%s[%d]%s", name, i, p), true
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					path, bad = name+" (a key)", true
					return false
				}
				if p, ok := invalidUTF8Value(fd.MapValue(), mv); ok {
					path, bad = fmt.Sprintf("%s[%q]%s", name, k.String(), p), true
					return false
				}
				return true
			})
			return !bad
		default:
			if p, ok := invalidUTF8Value(fd, v); ok {
				path, bad = name+p, true
				return false
			}
		}
		return true
	})
	return path, bad
}

func invalidUTF8Value(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "", !utf8.ValidString(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if p, bad := invalidUTF8(v.Message()); bad {
			return "." + p, true
		}
	}
	return "", false
}

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

// CheckMessages checks a batch of messages the way every write does and
// returns its encoded size: each message is not null, has a known role, only
// valid UTF-8 strings, a valid id (when set) and tool-call ids, a valid
// created_at, and an encoding within max_message_bytes; no id repeats. field
// names the batch ("messages"); offset is the index of msgs[0] in it, and
// seen, when not nil, carries ids across the calls for one batch sent in
// several frames.
func (l Limits) CheckMessages(field string, msgs []*sessiondv1.Message, offset int, seen map[string]int) (int64, error) {
	var total int64
	for i, m := range msgs {
		n, err := l.checkMessage(field, offset+i, m, seen)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (l Limits) checkMessage(field string, i int, m *sessiondv1.Message, seen map[string]int) (int64, error) {
	f := fmt.Sprintf("%s[%d]", field, i)
	if m == nil {
		return 0, Invalid(f, "is null")
	}
	if m.GetRole() == sessiondv1.Role_ROLE_UNSPECIFIED {
		return 0, Invalid(f+".role", "is unspecified")
	}
	if _, ok := sessiondv1.Role_name[int32(m.GetRole())]; !ok {
		return 0, Invalid(f+".role", "%d is not a known role", m.GetRole())
	}
	// Protobuf strings must be UTF-8; refuse here what would otherwise
	// fail (or panic) later, inside a backend's encoder.
	if path, bad := invalidUTF8(m.ProtoReflect()); bad {
		return 0, Invalid(f+"."+path, "is not valid UTF-8")
	}
	if id := m.GetId(); id != "" {
		if err := ValidateMessageID(f+".id", id); err != nil {
			return 0, err
		}
		if seen != nil {
			if j, dup := seen[id]; dup {
				return 0, Invalid(f+".id", "%q repeats %s[%d].id", clip(id), field, j)
			}
			seen[id] = i
		}
	}
	for j, tc := range m.GetToolCalls() {
		if err := ValidateMessageID(fmt.Sprintf("%s.tool_calls[%d].id", f, j), tc.GetId()); err != nil {
			return 0, err
		}
	}
	if ts := m.GetCreatedAt(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return 0, Invalid(f+".created_at", "is not a valid time: %v", err)
		}
	}
	n := int64(proto.Size(m))
	if n > l.MaxMessageBytes {
		return 0, &LimitError{Field: f, Limit: "max_message_bytes", Size: n, Max: l.MaxMessageBytes}
	}
	return n, nil
}

// PrepareMessages checks msgs with CheckMessages and returns copies ready to
// store: a missing id becomes a new UUID and a missing created_at becomes
// now. When whole is set, msgs are a session's whole messages (a create or
// save), which max_session_bytes bounds. The caller's messages are not
// modified.
func (l Limits) PrepareMessages(field string, msgs []*sessiondv1.Message, now time.Time, whole bool) ([]*sessiondv1.Message, error) {
	total, err := l.CheckMessages(field, msgs, 0, make(map[string]int, len(msgs)))
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

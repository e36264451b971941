package storage

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
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

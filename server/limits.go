package server

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Limits are the sizes the server enforces before a request reaches storage.
// A request over one fails with RESOURCE_EXHAUSTED and a message naming the
// limit by its ServerLimits field name (e.g. "max_title_bytes"), which is
// also the daemon's flag name with dashes.
type Limits struct {
	MaxMessageBytes  int64 // one encoded message
	MaxFrameBytes    int64 // one encoded request frame (also grpc.MaxRecvMsgSize)
	MaxTitleBytes    int64
	MaxSummaryBytes  int64
	MaxMapEntries    int64 // entries of a session's metadata or labels
	MaxMapKeyBytes   int64
	MaxMapValueBytes int64
	// MaxSessionBytes bounds the messages of one SaveSession stream, which
	// the server holds in memory until the stream is complete.
	MaxSessionBytes int64
}

// DefaultLimits returns the limits DESIGN.md names, plus a 1 MiB summary and
// a 1 GiB whole-session save.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes:  16 << 20,
		MaxFrameBytes:    64 << 20,
		MaxTitleBytes:    1 << 10,
		MaxSummaryBytes:  1 << 20,
		MaxMapEntries:    256,
		MaxMapKeyBytes:   256,
		MaxMapValueBytes: 64 << 10,
		MaxSessionBytes:  1 << 30,
	}
}

// Validate reports a limit that is not positive, naming it.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_message_bytes", l.MaxMessageBytes},
		{"max_frame_bytes", l.MaxFrameBytes},
		{"max_title_bytes", l.MaxTitleBytes},
		{"max_summary_bytes", l.MaxSummaryBytes},
		{"max_map_entries", l.MaxMapEntries},
		{"max_map_key_bytes", l.MaxMapKeyBytes},
		{"max_map_value_bytes", l.MaxMapValueBytes},
		{"max_session_bytes", l.MaxSessionBytes},
	} {
		if f.v <= 0 {
			return fmt.Errorf("limit %s is %d; it must be positive", f.name, f.v)
		}
	}
	// grpc-go takes the receive limit as an int; on 64-bit platforms any
	// int64 fits, and a frame over 2 GiB is refused by HTTP/2 framing anyway.
	return nil
}

// errTooLarge marks a request over a limit; toStatus maps it to
// RESOURCE_EXHAUSTED. Its text is not repeated in messages: they already say
// "over the <limit> limit".
var errTooLarge = errors.New("request too large")

func overLimit(field string, size int64, limit string, max int64) error {
	return &limitError{msg: fmt.Sprintf("%s is %d bytes, over the %s limit of %d", field, size, limit, max)}
}

// limitError is an errTooLarge whose message is only the description.
type limitError struct{ msg string }

func (e *limitError) Error() string        { return e.msg }
func (e *limitError) Is(target error) bool { return target == errTooLarge }

func (l Limits) checkFrame(m proto.Message) error {
	if n := int64(proto.Size(m)); n > l.MaxFrameBytes {
		return overLimit("request frame", n, "max_frame_bytes", l.MaxFrameBytes)
	}
	return nil
}

func (l Limits) checkTitle(field, s string) error {
	if int64(len(s)) > l.MaxTitleBytes {
		return overLimit(field, int64(len(s)), "max_title_bytes", l.MaxTitleBytes)
	}
	return nil
}

func (l Limits) checkSummary(field, s string) error {
	if int64(len(s)) > l.MaxSummaryBytes {
		return overLimit(field, int64(len(s)), "max_summary_bytes", l.MaxSummaryBytes)
	}
	return nil
}

// checkMap enforces the entry, key and value limits on a session's metadata
// or labels. Message metadata is bounded by max_message_bytes instead: it is
// part of the message's encoding, which is stored as it came.
func (l Limits) checkMap(field string, m map[string]string) error {
	if int64(len(m)) > l.MaxMapEntries {
		return &limitError{msg: fmt.Sprintf("%s has %d entries, over the max_map_entries limit of %d", field, len(m), l.MaxMapEntries)}
	}
	for k, v := range m {
		if k == "" {
			return fmt.Errorf("%s has an empty key: %w", field, storage.ErrInvalid)
		}
		if int64(len(k)) > l.MaxMapKeyBytes {
			return overLimit(fmt.Sprintf("%s key %q", field, clip(k)), int64(len(k)), "max_map_key_bytes", l.MaxMapKeyBytes)
		}
		if int64(len(v)) > l.MaxMapValueBytes {
			return overLimit(fmt.Sprintf("%s[%q]", field, clip(k)), int64(len(v)), "max_map_value_bytes", l.MaxMapValueBytes)
		}
	}
	return nil
}

// clip shortens a client's string for an error message.
func clip(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkMessages validates a batch the way storage.PrepareMessages would
// (role, ids, duplicates), so that storage never sees a bad message, and
// enforces max_message_bytes. It returns the batch's encoded size. seen,
// when not nil, carries ids across the frames of one SaveSession stream.
func (l Limits) checkMessages(field string, msgs []*sessiondv1.Message, offset int, seen map[string]int) (int64, error) {
	var total int64
	for i, m := range msgs {
		f := fmt.Sprintf("%s[%d]", field, offset+i)
		if m == nil {
			return 0, fmt.Errorf("%s is null: %w", f, storage.ErrInvalid)
		}
		if m.GetRole() == sessiondv1.Role_ROLE_UNSPECIFIED {
			return 0, fmt.Errorf("%s.role is unspecified: %w", f, storage.ErrInvalid)
		}
		if _, ok := sessiondv1.Role_name[int32(m.GetRole())]; !ok {
			return 0, fmt.Errorf("%s.role %d is not a known role: %w", f, m.GetRole(), storage.ErrInvalid)
		}
		if id := m.GetId(); id != "" {
			if err := storage.ValidateMessageID(f+".id", id); err != nil {
				return 0, err
			}
			if seen != nil {
				if j, dup := seen[id]; dup {
					return 0, fmt.Errorf("%s.id %q repeats %s[%d].id: %w", f, clip(id), field, j, storage.ErrInvalid)
				}
				seen[id] = offset + i
			}
		}
		for j, tc := range m.GetToolCalls() {
			if err := storage.ValidateMessageID(fmt.Sprintf("%s.tool_calls[%d].id", f, j), tc.GetId()); err != nil {
				return 0, err
			}
		}
		if ts := m.GetCreatedAt(); ts != nil {
			if err := ts.CheckValid(); err != nil {
				return 0, fmt.Errorf("%s.created_at: %v: %w", f, err, storage.ErrInvalid)
			}
		}
		n := int64(proto.Size(m))
		if n > l.MaxMessageBytes {
			return 0, overLimit(f, n, "max_message_bytes", l.MaxMessageBytes)
		}
		total += n
	}
	return total, nil
}

func (l Limits) toProto() *sessiondv1.ServerLimits {
	return &sessiondv1.ServerLimits{
		MaxMessageBytes:  l.MaxMessageBytes,
		MaxFrameBytes:    l.MaxFrameBytes,
		MaxTitleBytes:    l.MaxTitleBytes,
		MaxMapEntries:    l.MaxMapEntries,
		MaxMapKeyBytes:   l.MaxMapKeyBytes,
		MaxMapValueBytes: l.MaxMapValueBytes,
		MaxSummaryBytes:  l.MaxSummaryBytes,
		MaxSessionBytes:  l.MaxSessionBytes,
	}
}

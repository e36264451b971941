package storage

import (
	"fmt"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Limits are the sizes the Store enforces before a request reaches
// a Driver. A request over one fails with a *LimitError (ErrTooLarge) naming
// the limit by its ServerLimits field name (e.g. "max_title_bytes"), which is
// also the daemon's flag name with dashes.
type Limits struct {
	MaxMessageBytes  int64 // one encoded message
	MaxFrameBytes    int64 // one encoded request frame (the server's gRPC receive limit)
	MaxTitleBytes    int64
	MaxSummaryBytes  int64
	MaxMapEntries    int64 // entries of a session's metadata or labels, or of a message's metadata
	MaxMapKeyBytes   int64
	MaxMapValueBytes int64
	// MaxSessionBytes bounds the encoded messages of one Save (and of one
	// SaveSession stream, which the server holds in memory until complete).
	MaxSessionBytes int64
	MaxQueryBytes   int64 // one search query
}

// DefaultLimits returns the daemon's default limits.
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
		MaxQueryBytes:    1 << 10,
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
		{"max_query_bytes", l.MaxQueryBytes},
	} {
		if f.v <= 0 {
			return fmt.Errorf("limit %s is %d; it must be positive", f.name, f.v)
		}
	}
	return nil
}

// Proto returns the limits as GetServerInfo reports them.
func (l Limits) Proto() *sessiondv1.ServerLimits {
	return &sessiondv1.ServerLimits{
		MaxMessageBytes:  l.MaxMessageBytes,
		MaxFrameBytes:    l.MaxFrameBytes,
		MaxTitleBytes:    l.MaxTitleBytes,
		MaxMapEntries:    l.MaxMapEntries,
		MaxMapKeyBytes:   l.MaxMapKeyBytes,
		MaxMapValueBytes: l.MaxMapValueBytes,
		MaxSummaryBytes:  l.MaxSummaryBytes,
		MaxSessionBytes:  l.MaxSessionBytes,
		MaxQueryBytes:    l.MaxQueryBytes,
	}
}

// CheckTitle checks a title: valid UTF-8, at most max_title_bytes.
func (l Limits) CheckTitle(field, s string) error {
	return checkText(field, s, "max_title_bytes", l.MaxTitleBytes)
}

// CheckSummary checks a summary: valid UTF-8, at most max_summary_bytes.
func (l Limits) CheckSummary(field, s string) error {
	return checkText(field, s, "max_summary_bytes", l.MaxSummaryBytes)
}

// CheckMap checks a session's metadata or labels: at most max_map_entries
// entries; keys non-empty, valid UTF-8 and at most max_map_key_bytes; values
// valid UTF-8 and at most max_map_value_bytes. A message's own metadata has
// at most max_map_entries entries too (PrepareMessages), and its keys and
// values are bounded by max_message_bytes: they are part of the message's
// encoding, which is stored as it came.
func (l Limits) CheckMap(field string, m map[string]string) error {
	if int64(len(m)) > l.MaxMapEntries {
		return &LimitError{Field: field, Limit: "max_map_entries", Size: int64(len(m)), Max: l.MaxMapEntries}
	}
	for k, v := range m {
		if k == "" {
			return Invalid(field, "has an empty key")
		}
		if int64(len(k)) > l.MaxMapKeyBytes {
			return &LimitError{Field: fmt.Sprintf("%s key %q", field, msgcheck.Clip(k)), Limit: "max_map_key_bytes", Size: int64(len(k)), Max: l.MaxMapKeyBytes}
		}
		if int64(len(v)) > l.MaxMapValueBytes {
			return &LimitError{Field: fmt.Sprintf("%s[%q]", field, msgcheck.Clip(k)), Limit: "max_map_value_bytes", Size: int64(len(v)), Max: l.MaxMapValueBytes}
		}
	}
	return ValidateStringMap(field, m)
}

// CheckSessionBytes enforces max_session_bytes on the encoded size of the
// messages one Save (field names them) replaces a session's with.
func (l Limits) CheckSessionBytes(field string, total int64) error {
	if total > l.MaxSessionBytes {
		return &LimitError{Field: field, Limit: "max_session_bytes", Size: total, Max: l.MaxSessionBytes}
	}
	return nil
}

// CheckQuery checks a search query: valid UTF-8, at most max_query_bytes.
func (l Limits) CheckQuery(field, s string) error {
	return checkText(field, s, "max_query_bytes", l.MaxQueryBytes)
}

// checkText checks a text field against its limit (named limit, max bytes)
// and for valid UTF-8.
func checkText(field, s, limit string, maxBytes int64) error {
	if int64(len(s)) > maxBytes {
		return &LimitError{Field: field, Limit: limit, Size: int64(len(s)), Max: maxBytes}
	}
	return ValidateText(field, s)
}

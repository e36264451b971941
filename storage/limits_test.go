package storage

import (
	"errors"
	"strings"
	"testing"
)

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits: %v", err)
	}
	l := DefaultLimits()
	l.MaxMapEntries = 0
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "max_map_entries") {
		t.Fatalf("Validate with a zero limit = %v; want an error naming max_map_entries", err)
	}
}

func TestLimitErrorsNameTheLimit(t *testing.T) {
	l := Limits{MaxTitleBytes: 4, MaxSummaryBytes: 4, MaxMapEntries: 1, MaxMapKeyBytes: 2, MaxMapValueBytes: 2, MaxSessionBytes: 10, MaxFrameBytes: 1, MaxMessageBytes: 1, MaxQueryBytes: 4}
	for _, c := range []struct {
		name         string
		err          error
		field, limit string
	}{
		{"title", l.CheckTitle("title", "12345"), "title", "max_title_bytes"},
		{"summary", l.CheckSummary("summary", "12345"), "summary", "max_summary_bytes"},
		{"entries", l.CheckMap("labels", map[string]string{"a": "", "b": ""}), "labels", "max_map_entries"},
		{"key", l.CheckMap("metadata", map[string]string{"abc": ""}), `metadata key "abc"`, "max_map_key_bytes"},
		{"value", l.CheckMap("metadata", map[string]string{"a": "abc"}), `metadata["a"]`, "max_map_value_bytes"},
		{"session", l.CheckSessionBytes("messages", 11), "messages", "max_session_bytes"},
		{"query", l.CheckQuery("query", "12345"), "query", "max_query_bytes"},
	} {
		var le *LimitError
		if !errors.As(c.err, &le) || !errors.Is(c.err, ErrTooLarge) || errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v is not a *LimitError wrapping only ErrTooLarge", c.name, c.err)
			continue
		}
		if le.Field != c.field || le.Limit != c.limit {
			t.Errorf("%s: field %q, limit %q; want %q, %q", c.name, le.Field, le.Limit, c.field, c.limit)
		}
		if !strings.Contains(c.err.Error(), c.limit) || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: message %q does not name %s and %s", c.name, c.err, c.field, c.limit)
		}
	}
	var fe *FieldError
	if err := l.CheckMap("labels", map[string]string{"": "v"}); !errors.As(err, &fe) || fe.Field != "labels" {
		t.Errorf("an empty key = %v, want a FieldError naming labels", err)
	}
}

package storage

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func unknown999() []byte {
	b := protowire.AppendTag(nil, 999, protowire.VarintType)
	return protowire.AppendVarint(b, 7)
}

func TestPrepareMessagesFills(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	client := timestamppb.New(now.Add(-time.Hour))
	withUnknown := &sessiondv1.Message{Id: "u", Role: sessiondv1.Role_ROLE_USER}
	withUnknown.ProtoReflect().SetUnknown(unknown999())
	in := []*sessiondv1.Message{
		{Role: sessiondv1.Role_ROLE_USER, Content: "no id, no time"},
		{Id: "given", Role: sessiondv1.Role_ROLE_ASSISTANT, CreatedAt: client, ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Arguments: "{bad"}}},
		{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1"},
		withUnknown,
	}
	before := make([]*sessiondv1.Message, len(in))
	for i, m := range in {
		before[i] = proto.Clone(m).(*sessiondv1.Message)
	}
	out, enc, err := DefaultLimits().PrepareMessages("messages", in, now, false)
	if err != nil {
		t.Fatalf("PrepareMessages: %v", err)
	}
	if d := cmp.Diff(before, in, protocmp.Transform()); d != "" {
		t.Errorf("PrepareMessages changed its input (-before +after):\n%s", d)
	}
	if len(out) != len(in) || len(enc) != len(in) {
		t.Fatalf("got %d messages and %d encodings, want %d", len(out), len(enc), len(in))
	}
	for i, m := range out {
		// Only a message that lacked an id or a created_at is copied.
		if copied := in[i].GetId() == "" || in[i].GetCreatedAt() == nil; (m != in[i]) != copied {
			t.Errorf("message %d: copied is %v, want %v", i, m != in[i], copied)
		}
		var decoded sessiondv1.Message
		if err := proto.Unmarshal(enc[i], &decoded); err != nil || !proto.Equal(&decoded, m) {
			t.Errorf("message %d: encoding decodes to %v (%v), want %v", i, &decoded, err, m)
		}
		want := proto.Clone(in[i]).(*sessiondv1.Message)
		if want.Id == "" {
			if _, err := uuid.Parse(m.GetId()); err != nil {
				t.Errorf("message %d: filled-in id %q is not a UUID", i, m.GetId())
			}
			want.Id = m.GetId()
		}
		if want.CreatedAt == nil {
			want.CreatedAt = timestamppb.New(now)
		}
		if d := cmp.Diff(want, m, protocmp.Transform()); d != "" {
			t.Errorf("message %d (-want +got):\n%s", i, d)
		}
	}
	if out[0].GetId() == out[2].GetId() {
		t.Errorf("two filled-in ids are equal: %q", out[0].GetId())
	}
	if string(out[3].ProtoReflect().GetUnknown()) != string(unknown999()) {
		t.Errorf("unknown fields lost: %x", out[3].ProtoReflect().GetUnknown())
	}
	// Bytes fields are not text: any bytes are fine there.
	blob := &sessiondv1.Message{Id: "b", Role: sessiondv1.Role_ROLE_USER, Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{Data: []byte{0xff, 0xfe, 0}}}}}}
	if _, _, err := DefaultLimits().PrepareMessages("m", []*sessiondv1.Message{blob}, now, false); err != nil {
		t.Errorf("PrepareMessages of a binary blob: %v", err)
	}
	if out, _, err := DefaultLimits().PrepareMessages("m", nil, now, false); err != nil || len(out) != 0 {
		t.Errorf("PrepareMessages(nil) = %v, %v", out, err)
	}
}

func TestPrepareMessagesRefuses(t *testing.T) {
	user := func(id string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER}
	}
	for _, c := range []struct {
		name  string
		msgs  []*sessiondv1.Message
		field string // the field the error must name
	}{
		{"nil message", []*sessiondv1.Message{user("a"), nil}, "messages[1]"},
		{"unspecified role", []*sessiondv1.Message{{Id: "a"}}, "messages[0].role"},
		{"unknown role", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role(42)}}, "messages[0].role"},
		{"repeated id", []*sessiondv1.Message{user("a"), user("b"), user("a")}, "messages[2].id"},
		{"control character in id", []*sessiondv1.Message{user("a\x00")}, "messages[0].id"},
		{"id too long", []*sessiondv1.Message{user(strings.Repeat("x", MaxMessageIDBytes+1))}, "messages[0].id"},
		{"empty tool-call id", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "ok"}, {Name: "f"}}}}, "messages[0].tool_calls[1].id"},
		{"invalid UTF-8 content", []*sessiondv1.Message{user("a"), {Id: "b", Role: sessiondv1.Role_ROLE_USER, Content: "x\xff"}}, "messages[1].content"},
		{"invalid UTF-8 text part", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: "ok"}}, {Kind: &sessiondv1.ContentPart_Text{Text: "\xc3"}}}}}, "messages[0].parts[1].text"},
		{"invalid UTF-8 arguments", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "c", Arguments: "{\x80}"}}}}, "messages[0].tool_calls[0].arguments"},
		{"invalid UTF-8 metadata value", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Metadata: map[string]string{"k": "\xfe"}}}, `messages[0].metadata["k"]`},
		{"invalid UTF-8 metadata key", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Metadata: map[string]string{"\xfe": "v"}}}, "messages[0].metadata"},
		{"invalid UTF-8 reasoning", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER, Reasoning: &sessiondv1.Reasoning{Signature: "\xff"}}}, "messages[0].reasoning.signature"},
		{"invalid UTF-8 id", []*sessiondv1.Message{user("\xff")}, "messages[0].id"},
		{"bad tool-call id", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "x\ny"}}}}, "messages[0].tool_calls[0].id"},
	} {
		out, _, err := DefaultLimits().PrepareMessages("messages", c.msgs, time.Now(), false)
		if !errors.Is(err, ErrInvalid) || out != nil {
			t.Errorf("%s: got %v, %v; want nil, ErrInvalid", c.name, out, err)
			continue
		}
		// The field name is part of the message for people, not a contract
		// for code; check it so that the error stays useful.
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q does not name %s", c.name, err, c.field)
		}
	}
}

func TestSameMessage(t *testing.T) {
	ts := timestamppb.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	stored := &sessiondv1.Message{
		Id: "m", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "hi", CreatedAt: ts,
		ToolCalls: []*sessiondv1.ToolCall{{Id: "c", Name: "f", Arguments: `{"a":1}`}},
		Metadata:  map[string]string{"k": "v"},
	}
	withUnknown := proto.Clone(stored).(*sessiondv1.Message)
	withUnknown.ProtoReflect().SetUnknown(unknown999())
	edit := func(f func(m *sessiondv1.Message)) *sessiondv1.Message {
		c := proto.Clone(stored).(*sessiondv1.Message)
		f(c)
		return c
	}
	for _, c := range []struct {
		name     string
		stored   *sessiondv1.Message
		incoming *sessiondv1.Message
		want     bool
	}{
		{"identical", stored, proto.Clone(stored).(*sessiondv1.Message), true},
		{"created_at left to the server", stored, edit(func(m *sessiondv1.Message) { m.CreatedAt = nil }), true},
		{"other created_at", stored, edit(func(m *sessiondv1.Message) { m.CreatedAt = timestamppb.New(time.Unix(0, 1)) }), false},
		{"zero created_at is a created_at", stored, edit(func(m *sessiondv1.Message) { m.CreatedAt = &timestamppb.Timestamp{} }), false},
		{"created_at where none is stored", edit(func(m *sessiondv1.Message) { m.CreatedAt = nil }), stored, false},
		{"other content", stored, edit(func(m *sessiondv1.Message) { m.Content = "Hi" }), false},
		{"other content, no created_at", stored, edit(func(m *sessiondv1.Message) { m.Content = "Hi"; m.CreatedAt = nil }), false},
		{"other role", stored, edit(func(m *sessiondv1.Message) { m.Role = sessiondv1.Role_ROLE_USER }), false},
		{"other arguments (same JSON value)", stored, edit(func(m *sessiondv1.Message) { m.ToolCalls[0].Arguments = `{"a": 1}` }), false},
		{"other metadata", stored, edit(func(m *sessiondv1.Message) { m.Metadata["k"] = "w" }), false},
		{"no metadata", stored, edit(func(m *sessiondv1.Message) { m.Metadata = nil }), false},
		{"unknown fields kept", withUnknown, proto.Clone(withUnknown).(*sessiondv1.Message), true},
		{"unknown fields dropped", withUnknown, stored, false},
		{"unknown fields added", stored, withUnknown, false},
	} {
		in := proto.Clone(c.incoming).(*sessiondv1.Message)
		if got := SameMessage(c.stored, c.incoming); got != c.want {
			t.Errorf("%s: SameMessage = %v, want %v", c.name, got, c.want)
		}
		if !proto.Equal(in, c.incoming) {
			t.Errorf("%s: SameMessage changed the incoming message", c.name)
		}
	}
}

// TestMessageMetadataEntries: a message's metadata has at most
// max_map_entries entries, as a session's does; the error names the
// message's field and the limit.
func TestMessageMetadataEntries(t *testing.T) {
	l := DefaultLimits()
	meta := func(n int64) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprint("k", i)] = "v"
		}
		return m
	}
	ok := &sessiondv1.Message{Id: "a", Role: sessiondv1.Role_ROLE_USER, Metadata: meta(l.MaxMapEntries)}
	if _, _, err := l.PrepareMessages("messages", []*sessiondv1.Message{ok}, time.Now(), false); err != nil {
		t.Fatalf("%d metadata entries: %v, want accepted", l.MaxMapEntries, err)
	}
	over := &sessiondv1.Message{Id: "b", Role: sessiondv1.Role_ROLE_USER, Metadata: meta(10000)}
	_, _, err := l.PrepareMessages("messages", []*sessiondv1.Message{ok, over}, time.Now(), false)
	var le *LimitError
	if !errors.As(err, &le) || le.Field != "messages[1].metadata" || le.Limit != "max_map_entries" || le.Size != 10000 || le.Max != l.MaxMapEntries {
		t.Fatalf("10,000 metadata entries: %v, want a LimitError on messages[1].metadata, max_map_entries", err)
	}
}

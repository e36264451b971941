package storage

import (
	"errors"
	"slices"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestToolCallCloser covers what the load tests do not: a call id used
// again after it was answered gets its synthetic result after the later
// call only, and a long id gets a hashed, bounded synthetic id.
func TestToolCallCloser(t *testing.T) {
	call := func(id string, calls ...string) *sessiondv1.Message {
		m := &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_ASSISTANT}
		for _, c := range calls {
			m.ToolCalls = append(m.ToolCalls, &sessiondv1.ToolCall{Id: c})
		}
		return m
	}
	res := func(id, c string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: c}
	}
	long := strings.Repeat("x", 250) // the synthetic id would pass 256 bytes
	msgs := []*sessiondv1.Message{call("a1", "c1"), res("r1", "c1"), call("a2", "c1", long), {Id: "u", Role: sessiondv1.Role_ROLE_USER}}
	tally, err := Count("messages", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tally.OpenToolCallIDs, []string{"c1", long}) {
		t.Fatalf("open %v", tally.OpenToolCallIDs)
	}
	c := newToolCallCloser(tally.OpenToolCallIDs)
	var got []string
	send := func(m *sessiondv1.Message) error {
		got = append(got, m.GetId())
		if len(m.GetId()) > MaxMessageIDBytes {
			t.Errorf("synthetic id of %d bytes", len(m.GetId()))
		}
		return nil
	}
	for _, m := range msgs {
		if err := c.next(m, send); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.flush(send); err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || !slices.Equal(got[:4], []string{"a1", "r1", "a2", "sessiond-interrupted-c1"}) || got[5] != "u" {
		t.Fatalf("stream %v", got)
	}
	// Both synthetic results are what the pairing rule would accept.
	if _, err := tally.Add("messages", []*sessiondv1.Message{res("x1", "c1"), res("x2", long)}); err != nil {
		t.Fatal(err)
	}
}

// FuzzTally builds conversations from bytes (each byte: a kind and a call
// id from a small set, so that ids collide) and checks that the strict and
// the lenient counts agree when the strict one accepts, and that counting a
// conversation in two appends gives what counting it whole gives.
func FuzzTally(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x21, 0x22, 0x32}, uint8(2))
	f.Add([]byte{0x21, 0x00, 0x10, 0x10}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		if len(data) > 64 {
			return
		}
		msgs := make([]*sessiondv1.Message, len(data))
		for i, b := range data {
			id := string(rune('a' + b&3))
			m := &sessiondv1.Message{Id: strings.Repeat("m", i+1), Model: string(rune('p' + b>>6))}
			switch b >> 4 & 3 {
			case 0:
				m.Role = sessiondv1.Role_ROLE_USER
			case 1:
				m.Role = sessiondv1.Role_ROLE_ASSISTANT
				m.ToolCalls = []*sessiondv1.ToolCall{{Id: id}}
				m.Usage = &sessiondv1.Usage{InputTokens: int64(b), OutputTokens: 1}
			case 2:
				m.Role = sessiondv1.Role_ROLE_TOOL
				m.ToolCallId = id
			default:
				m.Role = sessiondv1.Role_ROLE_TOOL
			}
			msgs[i] = m
		}
		whole, err := Count("messages", msgs)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "messages[") {
				t.Fatalf("Count error %v does not name a message field", err)
			}
			return
		}
		if re := Recount(msgs); !SameTally(whole, re) {
			t.Fatalf("Count %+v, Recount %+v", whole, re)
		}
		k := int(cut) % (len(msgs) + 1)
		first, err := Count("messages", msgs[:k])
		if err != nil {
			t.Fatalf("a prefix of an accepted conversation was refused: %v", err)
		}
		both, err := first.Add("messages", msgs[k:])
		if err != nil || !SameTally(both, whole) {
			t.Fatalf("in two appends: %+v, %v; whole: %+v", both, err, whole)
		}
	})
}

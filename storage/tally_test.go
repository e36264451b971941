package storage

import (
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

package storage

import (
	"errors"
	"slices"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestCheckAppend(t *testing.T) {
	stored := map[string]*sessiondv1.Message{
		"a": {Id: "a", Role: sessiondv1.Role_ROLE_USER, Content: "A"},
		"b": {Id: "b", Role: sessiondv1.Role_ROLE_USER, Content: "B"},
	}
	lookups := 0
	lookup := func(id string) (*sessiondv1.Message, bool, error) {
		lookups++
		m, ok := stored[id]
		return m, ok, nil
	}
	user := func(id, content string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: content}
	}
	batch := func(ms ...*sessiondv1.Message) Messages {
		enc := make([][]byte, len(ms))
		for i := range ms {
			enc[i] = []byte{byte(i)}
		}
		return Messages{Prepared: ms, Encoded: enc, Sent: ms}
	}
	for _, c := range []struct {
		name     string
		msgs     Messages
		expected uint64
		fresh    []int // positions of the messages to append
		err      error
	}{
		{"all stored, same content: a retry", batch(user("a", "A"), user("b", "B")), 0, nil, nil},
		{"a retry with a stale revision still succeeds", batch(user("a", "A")), 3, nil, nil},
		{"stored id, other content", batch(user("a", "other")), 0, nil, ErrMessageConflict},
		{"stored, then a stored id with other content", batch(user("a", "A"), user("c", "C"), user("b", "other")), 0, nil, ErrMessageConflict},
		{"stored and new mixed: only the new", batch(user("a", "A"), user("c", "C")), 0, []int{1}, nil},
		{"new around stored", batch(user("", "x"), user("b", "B"), user("c", "C")), 0, []int{0, 2}, nil},
		{"stored and new, stale revision", batch(user("a", "A"), user("c", "C")), 6, nil, ErrConflict},
		{"new only", batch(user("c", "C"), user("", "D")), 0, []int{0, 1}, nil},
		{"new only, matching revision", batch(user("c", "C")), 7, []int{0}, nil},
		{"new only, stale revision", batch(user("c", "C")), 6, nil, ErrConflict},
		{"empty", batch(), 0, nil, nil},
	} {
		got, err := CheckAppend("s", c.msgs, c.expected, 7, Tally{}, lookup)
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) || !slices.Equal(got.Positions, c.fresh) || len(got.Prepared) != len(c.fresh) {
			t.Errorf("%s: CheckAppend = %v, %v; want positions %v, %v", c.name, got.Positions, err, c.fresh, c.err)
			continue
		}
		for k, i := range got.Positions {
			if got.Prepared[k] != c.msgs.Prepared[i] || got.Encoded[k][0] != byte(i) {
				t.Errorf("%s: new message %d is not the batch's message %d", c.name, k, i)
			}
		}
	}
	lookups = 0
	if _, err := CheckAppend("s", batch(user("", "x"), user("", "y")), 0, 7, Tally{}, lookup); err != nil || lookups != 0 {
		t.Errorf("server-chosen ids: %v, %d lookups; want none", err, lookups)
	}
	boom := errors.New("boom")
	if _, err := CheckAppend("s", batch(user("a", "A")), 0, 7, Tally{}, func(string) (*sessiondv1.Message, bool, error) { return nil, false, boom }); !errors.Is(err, boom) {
		t.Errorf("a failing lookup = %v, want its error", err)
	}

	// The tally counts only the new messages, and a pairing fault names the
	// message by its place in the batch.
	call := &sessiondv1.Message{Id: "call", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "t1", Name: "f"}}}
	stored["call"] = call
	open := Tally{OpenToolCallIDs: []string{"t1"}}
	result := &sessiondv1.Message{Id: "r", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "t1", Model: "m"}
	got, err := CheckAppend("s", batch(call, result), 0, 7, open, lookup)
	if err != nil || len(got.Tally.OpenToolCallIDs) != 0 || !slices.Equal(got.Tally.Models, []string{"m"}) {
		t.Errorf("a retried call with its new result: tally %+v, %v; want no open call and model m", got.Tally, err)
	}
	stray := &sessiondv1.Message{Id: "s2", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "nope"}
	_, err = CheckAppend("s", batch(user("a", "A"), user("", "x"), stray), 0, 7, Tally{}, lookup)
	if f, _ := ErrorField(err); f != "messages[2].tool_call_id" || !errors.Is(err, ErrInvalid) {
		t.Errorf("a stray result after a stored message = %v (field %q); want ErrInvalid naming messages[2].tool_call_id", err, f)
	}
}

func TestFieldErrors(t *testing.T) {
	err := InField("header", Invalid("ref.id", "is bad"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "header.ref.id" || !errors.Is(err, ErrInvalid) || err.Error() != "header.ref.id is bad" {
		t.Errorf("InField = %#v (%v)", err, err)
	}
	if f, ok := ErrorField(InField("x", &LimitError{Field: "[2]", Limit: "max_message_bytes"})); !ok || f != "x[2]" {
		t.Errorf("ErrorField of a LimitError under x = %q, %v", f, ok)
	}
	if err := InField("x", ErrConflict); err != ErrConflict {
		t.Errorf("InField changed an error without a field: %v", err)
	}
	_, err = ValidateRef(Ref{Namespace: "a/b", ID: "x"})
	if f, _ := ErrorField(err); f != "ref.namespace" {
		t.Errorf("ValidateRef with a bad namespace names %q, want ref.namespace", f)
	}
}

func TestApplyUpdate(t *testing.T) {
	cur := &Session{ID: "s", Alias: "a", Title: "t", Metadata: map[string]string{"k": "v"}, Parent: &ForkOrigin{SessionID: "p"}}
	next, changed := ApplyUpdate(cur, UpdateRequest{Fields: UpdateTitle | UpdateMetadata, Title: "t", Metadata: map[string]string{"k": "v"}, Alias: "ignored"})
	if changed || next.Alias != "a" {
		t.Errorf("an update to the stored values = %+v, changed %v; want no change", next, changed)
	}
	next, changed = ApplyUpdate(cur, UpdateRequest{Fields: UpdateAlias | UpdateLabels, Alias: "", Labels: map[string]string{"l": "1"}})
	if !changed || next.Alias != "" || next.Labels["l"] != "1" || next.Title != "t" {
		t.Errorf("ApplyUpdate = %+v, %v", next, changed)
	}
	next.Metadata["k"] = "changed"
	next.Parent.SessionID = "changed"
	if cur.Metadata["k"] != "v" || cur.Parent.SessionID != "p" {
		t.Errorf("ApplyUpdate's result shares the current session's maps or parent")
	}
}

package file

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestDecodeForTally: replaying appends with the lean decode gives the
// tally and derived title the full decode gives, and leaves out the text
// of a titled session.
func TestDecodeForTally(t *testing.T) {
	batch := []*sessiondv1.Message{
		{Id: "u1", Role: sessiondv1.Role_ROLE_USER, Content: "\n  What is the weather\nin Paris?", CreatedAt: timestamppb.Now(),
			Metadata: map[string]string{"k": "v"}},
		{Id: "a1", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-1", Usage: &sessiondv1.Usage{InputTokens: 10, OutputTokens: 3},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Name: "weather", Arguments: `{"city":"Paris"}`}, {Id: "c2", Name: "time"}},
			Reasoning: &sessiondv1.Reasoning{Text: "look it up"}},
		{Id: "t1", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1", Content: "sunny"},
		{Id: "a2", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-2", Usage: &sessiondv1.Usage{OutputTokens: 7}, Content: "Sunny.",
			State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING},
	}
	enc, err := marshalMessages(batch)
	if err != nil {
		t.Fatal(err)
	}
	full, err := decodeStored("s", enc)
	if err != nil {
		t.Fatal(err)
	}
	for _, untitled := range []bool{true, false} {
		want := &storage.Session{ID: "s"}
		if !untitled {
			want.Title = "kept"
		}
		got := *want
		want.Tally = want.Tally.AddStored(full)
		storage.DeriveTitle(want, full)
		if err := addStored(&got, enc); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Tally, want.Tally) || got.Title != want.Title || got.TitleDerived != want.TitleDerived {
			t.Errorf("untitled %v: tally %+v, title %q (derived %v); want %+v, %q (%v)", untitled,
				got.Tally, got.Title, got.TitleDerived, want.Tally, want.Title, want.TitleDerived)
		}
	}
	lean, err := decodeForTally("s", enc, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := lean[0]; m.GetContent() != "" || m.GetCreatedAt() != nil || m.GetMetadata() != nil || lean[1].GetReasoning() != nil {
		t.Errorf("lean decode kept what no tally reads: %v, %v", m, lean[1])
	}
	if _, err := decodeForTally("s", [][]byte{{0x0a, 0x05, 'a'}}, false); !errors.Is(err, errCorrupt) {
		t.Errorf("truncated message: %v, want errCorrupt", err)
	}
}

// TestTallyFieldNumbers: the field numbers decodeForTally keeps are the
// Message fields of those names.
func TestTallyFieldNumbers(t *testing.T) {
	fields := (&sessiondv1.Message{}).ProtoReflect().Descriptor().Fields()
	for name, num := range map[protoreflect.Name]protowire.Number{
		"id": fMsgID, "role": fMsgRole, "content": fMsgContent, "parts": fMsgParts, "tool_calls": fMsgToolCalls,
		"tool_call_id": fMsgToolCallID, "model": fMsgModel, "usage": fMsgUsage, "state": fMsgState,
	} {
		if f := fields.ByName(name); f == nil || protowire.Number(f.Number()) != num {
			t.Errorf("Message field %s: %v, want number %d", name, f, num)
		}
	}
}

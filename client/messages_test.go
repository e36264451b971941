package client_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestMessageConstructors(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  *sessiondv1.Message
		want *sessiondv1.Message
	}{
		{"UserText", client.UserText("hi"),
			&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "hi"}},
		{"AssistantText", client.AssistantText("hello"),
			&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "hello"}},
		{"AssistantText with model and usage",
			client.AssistantText("hello", client.WithModel("gpt-4.1"), client.WithUsage(12, 3)),
			&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "hello", Model: "gpt-4.1",
				Usage: &sessiondv1.Usage{InputTokens: 12, OutputTokens: 3}}},
		{"ToolCall", client.ToolCall("call_1", "get_weather", `{"city":"Paris"}`, client.WithModel("m")),
			&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m", ToolCalls: []*sessiondv1.ToolCall{
				{Id: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}},
		{"ToolResult", client.ToolResult("call_1", "14°C"),
			&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_1", Content: "14°C"}},
	} {
		if !proto.Equal(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// The constructors make messages the daemon accepts, and a call with its
// result leaves no call open.
func TestMessageConstructorsPassTheDaemonRules(t *testing.T) {
	msgs := []*sessiondv1.Message{
		client.UserText("weather?"),
		client.ToolCall("call_1", "get_weather", `{}`),
		client.ToolResult("call_1", "sunny"),
		client.AssistantText("sunny", client.WithModel("m"), client.WithUsage(1, 2)),
	}
	for i, m := range msgs {
		if f := msgcheck.Message("messages", m); f != nil {
			t.Errorf("message %d: %s %s", i, f.Field, f.Description)
		}
	}
	open, f := msgcheck.OpenCalls(nil, "messages", msgs, true)
	if f != nil || len(open) != 0 {
		t.Errorf("OpenCalls = %v, %v; want none open", open, f)
	}
}

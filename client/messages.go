package client

import sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"

// MessageOption sets an optional field of a message made by AssistantText
// or ToolCall.
type MessageOption func(*sessiondv1.Message)

// WithModel records the model that wrote an assistant message.
func WithModel(model string) MessageOption {
	return func(m *sessiondv1.Message) { m.Model = model }
}

// WithUsage records the tokens a model call read and wrote. For cached or
// reasoning tokens, set the message's Usage yourself.
func WithUsage(inputTokens, outputTokens int64) MessageOption {
	return func(m *sessiondv1.Message) {
		m.Usage = &sessiondv1.Usage{InputTokens: inputTokens, OutputTokens: outputTokens}
	}
}

// UserText is a user's turn of plain text.
func UserText(text string) *sessiondv1.Message {
	return &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: text}
}

// AssistantText is the model's answer in plain text.
func AssistantText(text string, opts ...MessageOption) *sessiondv1.Message {
	m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: text}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// ToolCall is an assistant message that calls one tool: callID is the id the
// model gave the call (ToolResult answers it), arguments its JSON text. A
// turn that calls several tools at once is one message whose ToolCalls
// lists them all.
func ToolCall(callID, name, arguments string, opts ...MessageOption) *sessiondv1.Message {
	m := &sessiondv1.Message{
		Role:      sessiondv1.Role_ROLE_ASSISTANT,
		ToolCalls: []*sessiondv1.ToolCall{{Id: callID, Name: name, Arguments: arguments}},
	}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// ToolResult is the tool's answer to the call callID.
func ToolResult(callID, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: callID, Content: content}
}

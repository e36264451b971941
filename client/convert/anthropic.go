package convert

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Metadata keys of the anthropic mapping.
const (
	anthIsError  = "anthropic.is_error" // "true": a tool_result block with is_error
	anthRedacted = "anthropic.redacted" // "true": the reasoning is a redacted_thinking block (its data in the signature)
)

func importAnthropic(data []byte, ws *warnings) (*sessiondv1.Session, error) {
	top, err := parseObj("", data)
	if err != nil {
		return nil, err
	}
	s := &sessiondv1.Session{}
	if sys := top.raw("system"); sys != nil {
		m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_SYSTEM}
		if isString(sys) {
			_ = json.Unmarshal(sys, &m.Content)
		} else {
			blocks, err := anthBlocks("system", sys)
			if err != nil {
				return nil, err
			}
			for _, b := range blocks {
				if b.typ == "text" && b.plain {
					m.Parts = append(m.Parts, textPart(b.text))
				} else {
					m.Parts = append(m.Parts, jsonPart(b.raw))
				}
			}
		}
		s.Messages = append(s.Messages, m)
	}
	raws, err := messagesOf(top, "messages")
	if err != nil {
		return nil, err
	}
	for i, raw := range raws {
		o, err := parseObj(fmt.Sprintf("messages[%d]", i), raw)
		if err != nil {
			return nil, err
		}
		role, err := o.str("role")
		if err != nil {
			return nil, err
		}
		at := len(s.Messages)
		c := o.raw("content")
		switch role {
		case "user":
			if isString(c) {
				m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER}
				_ = json.Unmarshal(c, &m.Content)
				s.Messages = append(s.Messages, m)
				break
			}
			msgs, err := anthUserIn(o.field("content"), c)
			if err != nil {
				return nil, err
			}
			s.Messages = append(s.Messages, msgs...)
		case "assistant":
			m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT}
			if isString(c) {
				_ = json.Unmarshal(c, &m.Content)
			} else if err := anthAssistantIn(o.field("content"), c, m, at, ws); err != nil {
				return nil, err
			}
			s.Messages = append(s.Messages, m)
		case "":
			return nil, fmt.Errorf("%s: missing", o.field("role"))
		default:
			return nil, fmt.Errorf("%s: %q is not user or assistant", o.field("role"), role)
		}
		o.unknown(ws, at)
	}
	keepParams(Anthropic, top, s)
	return s, nil
}

// block is one content block of an input, read far enough to map it.
type block struct {
	raw   json.RawMessage
	o     *jobj
	typ   string
	text  string // of a text block
	plain bool   // a text block with no other key (no cache_control, no citations)
}

func anthBlocks(path string, raw json.RawMessage) ([]block, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: neither a string nor an array", path)
	}
	out := make([]block, len(list))
	for j, r := range list {
		o, err := parseObj(fmt.Sprintf("%s[%d]", path, j), r)
		if err != nil {
			return nil, err
		}
		b := block{raw: r, o: o}
		if b.typ, err = o.str("type"); err != nil {
			return nil, err
		}
		if b.typ == "" {
			return nil, fmt.Errorf("%s: missing", o.field("type"))
		}
		if b.typ == "text" {
			if b.text, err = o.str("text"); err != nil {
				return nil, err
			}
			b.plain = len(o.rest()) == 0
		}
		out[j] = b
	}
	return out, nil
}

// anthPart maps a content block of a user message or a tool result: text
// to a text part, a base64 image or PDF to a blob, a plain-text document
// to a text/plain blob, anything else kept as a JSON part.
func anthPart(b block) *sessiondv1.ContentPart {
	switch {
	case b.typ == "text" && b.plain:
		return textPart(b.text)
	case (b.typ == "image" || b.typ == "document") && len(b.o.rest()) == 1:
		var src struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		}
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(b.o.m["source"], &fields)
		if json.Unmarshal(b.o.m["source"], &src) != nil || len(fields) != 3 || src.MediaType == "" {
			break
		}
		switch {
		case src.Type == "base64":
			if data, err := base64.StdEncoding.DecodeString(src.Data); err == nil {
				return blobPart(&sessiondv1.Blob{MimeType: src.MediaType, Data: data})
			}
		case src.Type == "text" && b.typ == "document" && src.MediaType == "text/plain":
			return blobPart(&sessiondv1.Blob{MimeType: src.MediaType, Data: []byte(src.Data)})
		}
	}
	return jsonPart(b.raw)
}

// anthUserIn splits a user message's blocks: each tool_result becomes a
// ROLE_TOOL message, the other blocks one user message after them.
func anthUserIn(path string, raw json.RawMessage) ([]*sessiondv1.Message, error) {
	blocks, err := anthBlocks(path, raw)
	if err != nil {
		return nil, err
	}
	var out []*sessiondv1.Message
	var user *sessiondv1.Message
	for _, b := range blocks {
		if b.typ != "tool_result" {
			if user == nil {
				user = &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER}
			}
			user.Parts = append(user.Parts, anthPart(b))
			continue
		}
		m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL}
		o := b.o
		if m.ToolCallId, err = o.str("tool_use_id"); err != nil {
			return nil, err
		}
		if v := o.raw("is_error"); v != nil {
			var isErr bool
			if err := json.Unmarshal(v, &isErr); err != nil {
				return nil, fmt.Errorf("%s: not a boolean", o.field("is_error"))
			}
			if isErr {
				setMeta(m, anthIsError, "true")
			}
		}
		if c := o.raw("content"); isString(c) {
			_ = json.Unmarshal(c, &m.Content)
		} else if c != nil {
			inner, err := anthBlocks(o.field("content"), c)
			if err != nil {
				return nil, err
			}
			for _, ib := range inner {
				m.Parts = append(m.Parts, anthPart(ib))
			}
		}
		if len(o.rest()) > 0 {
			// Keys this package does not know (cache_control...): keep
			// the whole block rather than lose them.
			m = &sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: m.GetToolCallId(), Parts: []*sessiondv1.ContentPart{jsonPart(b.raw)}}
		}
		out = append(out, m)
	}
	if user != nil {
		out = append(out, user)
	}
	return out, nil
}

// anthAssistantIn reads an assistant's blocks: thinking (or
// redacted_thinking) into the reasoning, text into text parts, tool_use
// into tool calls, anything else kept as a JSON part.
func anthAssistantIn(path string, raw json.RawMessage, m *sessiondv1.Message, at int, ws *warnings) error {
	blocks, err := anthBlocks(path, raw)
	if err != nil {
		return err
	}
	for _, b := range blocks {
		o := b.o
		switch b.typ {
		case "thinking", "redacted_thinking":
			if m.Reasoning != nil {
				break // a second one is kept as a JSON part
			}
			m.Reasoning = &sessiondv1.Reasoning{}
			if b.typ == "thinking" {
				if m.Reasoning.Text, err = o.str("thinking"); err != nil {
					return err
				}
				if m.Reasoning.Signature, err = o.str("signature"); err != nil {
					return err
				}
			} else {
				setMeta(m, anthRedacted, "true")
				if m.Reasoning.Signature, err = o.str("data"); err != nil {
					return err
				}
			}
			o.unknown(ws, at)
			continue
		case "tool_use":
			tc := &sessiondv1.ToolCall{}
			if tc.Id, err = o.str("id"); err != nil {
				return err
			}
			if tc.Name, err = o.str("name"); err != nil {
				return err
			}
			if in := o.raw("input"); in != nil {
				tc.Arguments = compact(in)
			} else {
				tc.Arguments = "{}"
			}
			o.unknown(ws, at)
			m.ToolCalls = append(m.ToolCalls, tc)
			continue
		}
		m.Parts = append(m.Parts, anthPart(b))
	}
	return nil
}

func exportAnthropic(s *sessiondv1.Session, o ExportOptions, doc obj, ws *warnings) (obj, error) {
	if _, ok := s.GetMetadata()["anthropic.max_tokens"]; !ok && o.MaxTokens <= 0 {
		ws.add("max_tokens", -1, "required by the Messages API; the session has none (give one)")
	}
	msgs := s.GetMessages()
	var system []*sessiondv1.Message
	var out []any
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		anthDrops(i, m, ws)
		p := anthParts(ws, i)
		switch m.GetRole() {
		case sessiondv1.Role_ROLE_SYSTEM:
			if len(out) > 0 {
				ws.add("message.role", i, "anthropic holds system text only before the conversation; moved to the top-level system")
			}
			system = append(system, m)
		case sessiondv1.Role_ROLE_USER:
			out = append(out, obj{{"role", "user"}, {"content", stringOrBlocks(m, p)}})
		case sessiondv1.Role_ROLE_TOOL:
			// A run of tool results is one user message, with the user
			// message after it if there is one (the API wants the roles to
			// alternate, and tool results first in their message).
			var blocks []any
			for ; i < len(msgs) && msgs[i].GetRole() == sessiondv1.Role_ROLE_TOOL; i++ {
				if msgs[i] != m { // the first was checked above
					anthDrops(i, msgs[i], ws)
				}
				blocks = append(blocks, anthToolResult(i, msgs[i], ws))
			}
			if i < len(msgs) && msgs[i].GetRole() == sessiondv1.Role_ROLE_USER {
				anthDrops(i, msgs[i], ws)
				blocks = append(blocks, anthParts(ws, i).content(msgs[i])...)
			} else {
				i--
			}
			out = append(out, obj{{"role", "user"}, {"content", blocks}})
		case sessiondv1.Role_ROLE_ASSISTANT:
			if m.GetReasoning() == nil && len(m.GetToolCalls()) == 0 && len(m.GetParts()) == 0 {
				out = append(out, obj{{"role", "assistant"}, {"content", m.GetContent()}})
				continue
			}
			var blocks []any
			if r := m.GetReasoning(); r != nil {
				if m.GetMetadata()[anthRedacted] == "true" {
					blocks = append(blocks, obj{{"type", "redacted_thinking"}, {"data", r.GetSignature()}})
				} else {
					blocks = append(blocks, obj{{"type", "thinking"}, {"thinking", r.GetText()}, {"signature", r.GetSignature()}})
				}
			}
			blocks = append(blocks, p.content(m)...)
			for _, tc := range m.GetToolCalls() {
				var input any = json.RawMessage(tc.GetArguments())
				if !json.Valid([]byte(tc.GetArguments())) {
					ws.add("message.tool_calls.arguments", i, "not JSON, and anthropic needs a JSON object; sent as {}")
					input = obj{}
				}
				blocks = append(blocks, obj{{"type", "tool_use"}, {"id", tc.GetId()}, {"name", tc.GetName()}, {"input", input}})
			}
			out = append(out, obj{{"role", "assistant"}, {"content", blocks}})
		default:
			return nil, fmt.Errorf("message %d: role %s has no anthropic role", i, m.GetRole())
		}
	}
	switch {
	case len(system) == 1 && len(system[0].GetParts()) == 0:
		doc = append(doc, kv{"system", system[0].GetContent()})
	case len(system) > 0:
		var blocks []any
		for _, m := range system {
			blocks = append(blocks, anthParts(ws, -1).content(m)...)
		}
		doc = append(doc, kv{"system", blocks})
	}
	if out == nil {
		out = []any{}
	}
	return append(doc, kv{"messages", out}), nil
}

// anthDrops warns, once per message, about what anthropic does not carry
// of message i.
func anthDrops(i int, m *sessiondv1.Message, ws *warnings) {
	messageDrops(Anthropic, i, m, ws, anthIsError, anthRedacted)
	roleDrops(Anthropic, i, m, ws, "tool results")
}

func anthParts(ws *warnings, at int) *partWriter {
	return &partWriter{f: Anthropic, ws: ws, at: at,
		text: func(s string) obj { return obj{{"type", "text"}, {"text", s}} }, blob: anthBlob}
}

func anthToolResult(i int, m *sessiondv1.Message, ws *warnings) any {
	if m.GetToolCallId() == "" {
		ws.add("message.tool_call_id", i, "empty; anthropic requires tool_use_id on a tool result")
	}
	// A block kept whole on import goes back as it was.
	if ps := m.GetParts(); m.GetContent() == "" && len(ps) == 1 {
		if raw, typ, ok := typedJSON(ps[0].GetJson()); ok && typ == "tool_result" {
			return raw
		}
	}
	b := obj{{"type", "tool_result"}, {"tool_use_id", m.GetToolCallId()}, {"content", stringOrBlocks(m, anthParts(ws, i))}}
	if m.GetMetadata()[anthIsError] == "true" {
		b = append(b, kv{"is_error", true})
	}
	return b
}

// anthBlob writes images and PDFs as base64 blocks and plain text as a
// text document.
func anthBlob(b *sessiondv1.Blob) (obj, bool) {
	mt := b.GetMimeType()
	switch {
	case mt == "image/jpeg" || mt == "image/png" || mt == "image/gif" || mt == "image/webp":
		return obj{{"type", "image"}, {"source", obj{{"type", "base64"}, {"media_type", mt},
			{"data", base64.StdEncoding.EncodeToString(b.GetData())}}}}, true
	case mt == "application/pdf":
		return obj{{"type", "document"}, {"source", obj{{"type", "base64"}, {"media_type", mt},
			{"data", base64.StdEncoding.EncodeToString(b.GetData())}}}}, true
	case mt == "text/plain":
		return obj{{"type", "document"}, {"source", obj{{"type", "text"}, {"media_type", mt}, {"data", string(b.GetData())}}}}, true
	}
	return nil, false
}

package convert

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Metadata keys of the openai-chat mapping.
const chatRoleKey = "openai-chat.role" // "developer": a system message sent with the developer role

func importChat(data []byte, ws *warnings) (*sessiondv1.Session, error) {
	top, err := parseObj("", data)
	if err != nil {
		return nil, err
	}
	raws, err := messagesOf(top, "messages")
	if err != nil {
		return nil, err
	}
	s := &sessiondv1.Session{}
	for i, raw := range raws {
		path := fmt.Sprintf("messages[%d]", i)
		o, err := parseObj(path, raw)
		if err != nil {
			return nil, err
		}
		m, err := chatMessageIn(o, i, ws)
		if err != nil {
			return nil, err
		}
		if m != nil {
			s.Messages = append(s.Messages, m)
		}
		o.unknown(ws, i)
	}
	keepParams(OpenAIChat, top, s)
	return s, nil
}

func chatMessageIn(o *jobj, i int, ws *warnings) (*sessiondv1.Message, error) {
	role, err := o.str("role")
	if err != nil {
		return nil, err
	}
	m := &sessiondv1.Message{}
	switch role {
	case "system":
		m.Role = sessiondv1.Role_ROLE_SYSTEM
	case "developer":
		m.Role = sessiondv1.Role_ROLE_SYSTEM
		setMeta(m, chatRoleKey, "developer")
	case "user":
		m.Role = sessiondv1.Role_ROLE_USER
	case "assistant":
		m.Role = sessiondv1.Role_ROLE_ASSISTANT
	case "tool":
		m.Role = sessiondv1.Role_ROLE_TOOL
	case "function":
		for k := range o.m {
			o.used[k] = true
		}
		ws.add(o.path, i, "the deprecated function role has no tool call id to pair it with; message dropped")
		return nil, nil
	case "":
		return nil, fmt.Errorf("%s: missing", o.field("role"))
	default:
		return nil, fmt.Errorf("%s: %q is not system, developer, user, assistant or tool", o.field("role"), role)
	}
	if m.Name, err = o.str("name"); err != nil {
		return nil, err
	}
	if m.ToolCallId, err = o.str("tool_call_id"); err != nil {
		return nil, err
	}
	if c := o.raw("content"); c != nil {
		if isString(c) {
			_ = json.Unmarshal(c, &m.Content)
		} else {
			parts, err := chatPartsIn(o.field("content"), c, i, ws)
			if err != nil {
				return nil, err
			}
			m.Parts = parts
		}
	}
	calls, err := o.list("tool_calls")
	if err != nil {
		return nil, err
	}
	for j, raw := range calls {
		c, err := parseObj(fmt.Sprintf("%s[%d]", o.field("tool_calls"), j), raw)
		if err != nil {
			return nil, err
		}
		typ, _ := c.str("type")
		if typ != "function" {
			ws.add(c.field("type"), i, "tool call type %q is not understood; call dropped", typ)
			for k := range c.m {
				c.used[k] = true
			}
			continue
		}
		fn, err := parseObj(c.field("function"), c.raw("function"))
		if err != nil {
			return nil, err
		}
		tc := &sessiondv1.ToolCall{}
		if tc.Id, err = c.str("id"); err != nil {
			return nil, err
		}
		if tc.Name, err = fn.str("name"); err != nil {
			return nil, err
		}
		if tc.Arguments, err = fn.str("arguments"); err != nil {
			return nil, err
		}
		fn.unknown(ws, i)
		c.unknown(ws, i)
		m.ToolCalls = append(m.ToolCalls, tc)
	}
	return m, nil
}

// chatPartsIn reads a content array: text parts, data-URL images and
// input audio become parts; other parts are kept as JSON parts.
func chatPartsIn(path string, raw json.RawMessage, i int, ws *warnings) ([]*sessiondv1.ContentPart, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: neither a string nor an array", path)
	}
	var parts []*sessiondv1.ContentPart
	for j, r := range list {
		p, err := parseObj(fmt.Sprintf("%s[%d]", path, j), r)
		if err != nil {
			return nil, err
		}
		typ, _ := p.str("type")
		switch typ {
		case "text":
			t, err := p.str("text")
			if err != nil {
				return nil, err
			}
			if len(p.rest()) == 0 {
				parts = append(parts, textPart(t))
				continue
			}
		case "image_url":
			if len(p.rest()) == 1 {
				var img struct {
					URL string `json:"url"`
				}
				var fields map[string]json.RawMessage
				_ = json.Unmarshal(p.m["image_url"], &fields)
				if json.Unmarshal(p.m["image_url"], &img) == nil && len(fields) == 1 {
					if b, ok := parseDataURL(img.URL); ok {
						parts = append(parts, blobPart(b))
						continue
					}
				}
			}
		case "input_audio":
			var a struct {
				Data   string `json:"data"`
				Format string `json:"format"`
			}
			if len(p.rest()) == 1 && json.Unmarshal(p.m["input_audio"], &a) == nil && a.Format != "" {
				if b, err := base64.StdEncoding.DecodeString(a.Data); err == nil {
					parts = append(parts, blobPart(&sessiondv1.Blob{MimeType: "audio/" + a.Format, Data: b}))
					continue
				}
			}
		case "":
			return nil, fmt.Errorf("%s: missing", p.field("type"))
		}
		// Anything else (remote images, files, refusals, extra keys) is
		// kept whole: an export to this format writes it back as it was.
		parts = append(parts, jsonPart(r))
	}
	return parts, nil
}

func exportChat(s *sessiondv1.Session, _ ExportOptions, doc obj, ws *warnings) (obj, error) {
	msgs := make([]any, 0, len(s.GetMessages()))
	for i, m := range s.GetMessages() {
		out, err := chatMessageOut(i, m, ws)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, out)
	}
	return append(doc, kv{"messages", msgs}), nil
}

func chatMessageOut(i int, m *sessiondv1.Message, ws *warnings) (obj, error) {
	messageDrops(OpenAIChat, i, m, ws, chatRoleKey)
	p := &partWriter{f: OpenAIChat, ws: ws, at: i,
		text: func(s string) obj { return obj{{"type", "text"}, {"text", s}} }}
	var out obj
	switch m.GetRole() {
	case sessiondv1.Role_ROLE_SYSTEM:
		role := "system"
		if m.GetMetadata()[chatRoleKey] == "developer" {
			role = "developer"
		}
		out = obj{{"role", role}, {"content", stringOrBlocks(m, p)}}
	case sessiondv1.Role_ROLE_USER:
		p.blob = chatBlob
		out = obj{{"role", "user"}, {"content", stringOrBlocks(m, p)}}
	case sessiondv1.Role_ROLE_ASSISTANT:
		var content any = stringOrBlocks(m, p)
		if m.GetContent() == "" && len(m.GetParts()) == 0 {
			content = nil // what the API itself answers for a turn of tool calls
		}
		out = obj{{"role", "assistant"}, {"content", content}}
	case sessiondv1.Role_ROLE_TOOL:
		if m.GetToolCallId() == "" {
			ws.add("message.tool_call_id", i, "empty; openai-chat requires it on a tool message")
		}
		out = obj{{"role", "tool"}, {"tool_call_id", m.GetToolCallId()}, {"content", stringOrBlocks(m, p)}}
	default:
		return nil, fmt.Errorf("message %d: role %s has no openai-chat role", i, m.GetRole())
	}
	if m.GetName() != "" {
		if m.GetRole() == sessiondv1.Role_ROLE_TOOL {
			ws.add("message.name", i, "openai-chat has no name on tool messages; dropped")
		} else {
			out = append(out, kv{"name", m.GetName()})
		}
	}
	if m.GetToolCallId() != "" && m.GetRole() != sessiondv1.Role_ROLE_TOOL {
		ws.add("message.tool_call_id", i, "only tool messages carry one in openai-chat; dropped")
	}
	if r := m.GetReasoning(); r != nil {
		if r.GetText() != "" {
			ws.add("message.reasoning.text", i, "not held by openai-chat; dropped")
		}
		if r.GetSignature() != "" {
			ws.add("message.reasoning.signature", i, "not held by openai-chat; dropped")
		}
	}
	if len(m.GetToolCalls()) > 0 {
		if m.GetRole() != sessiondv1.Role_ROLE_ASSISTANT {
			ws.add("message.tool_calls", i, "only assistant messages carry them in openai-chat; dropped")
		} else {
			calls := make([]any, len(m.GetToolCalls()))
			for j, tc := range m.GetToolCalls() {
				calls[j] = obj{{"id", tc.GetId()}, {"type", "function"},
					{"function", obj{{"name", tc.GetName()}, {"arguments", tc.GetArguments()}}}}
			}
			out = append(out, kv{"tool_calls", calls})
		}
	}
	return out, nil
}

// chatBlob writes images as data URLs and WAV or MP3 audio as input audio.
func chatBlob(b *sessiondv1.Blob) (obj, bool) {
	mt := b.GetMimeType()
	switch {
	case strings.HasPrefix(mt, "image/"):
		return obj{{"type", "image_url"}, {"image_url", obj{{"url", dataURL(b)}}}}, true
	case mt == "audio/wav" || mt == "audio/mp3":
		return obj{{"type", "input_audio"}, {"input_audio", obj{
			{"data", base64.StdEncoding.EncodeToString(b.GetData())}, {"format", strings.TrimPrefix(mt, "audio/")}}}}, true
	}
	return nil, false
}

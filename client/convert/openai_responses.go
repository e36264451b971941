package convert

import (
	"encoding/json"
	"fmt"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Metadata keys of the openai-responses mapping: the item ids and statuses
// of the items that became a message, so that an export gives them back.
const (
	respPrefix       = "openai-responses."
	respInstructions = respPrefix + "instructions" // "true": the system message came from the instructions parameter
	respRole         = respPrefix + "role"         // "developer"
	respMessageID    = respPrefix + "message.id"
	respMessageState = respPrefix + "message.status"
	respReasoningID  = respPrefix + "reasoning.id"
	respOutputID     = respPrefix + "output.id"     // a function_call_output item's id
	respOutputState  = respPrefix + "output.status" // its status
	respInputString  = respPrefix + "input_string"  // "true": the input was a string, the short form of one user message
)

// respCallKey is the metadata key of a function_call item's id or status.
func respCallKey(callID, what string) string { return respPrefix + "call." + callID + "." + what }

func importResponses(data []byte, ws *warnings) (*sessiondv1.Session, error) {
	top, err := parseObj("", data)
	if err != nil {
		return nil, err
	}
	s := &sessiondv1.Session{}
	if top.has("instructions") {
		text, err := top.str("instructions")
		if err != nil {
			return nil, err
		}
		m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_SYSTEM, Content: text}
		setMeta(m, respInstructions, "true")
		s.Messages = append(s.Messages, m)
	}
	if !top.has("input") {
		return nil, fmt.Errorf("input: missing; a conversation needs it")
	}
	if in := top.m["input"]; isString(in) {
		// The short form: one user message.
		text, _ := top.str("input")
		m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: text}
		setMeta(m, respInputString, "true")
		s.Messages = append(s.Messages, m)
		keepParams(OpenAIResponses, top, s)
		return s, nil
	}
	items, err := top.list("input")
	if err != nil {
		return nil, err
	}
	// turn is the assistant message the current run of reasoning, output
	// message and function_call items fills; any other item ends the run.
	var turn *sessiondv1.Message
	startTurn := func() *sessiondv1.Message {
		turn = &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT}
		s.Messages = append(s.Messages, turn)
		return turn
	}
	for i, raw := range items {
		o, err := parseObj(fmt.Sprintf("input[%d]", i), raw)
		if err != nil {
			return nil, err
		}
		at := len(s.Messages)
		typ, err := o.str("type")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "", "message":
			role, err := o.str("role")
			if err != nil {
				return nil, err
			}
			var m *sessiondv1.Message
			if role == "assistant" {
				if turn == nil || turn.GetContent() != "" || len(turn.GetParts()) > 0 || len(turn.GetToolCalls()) > 0 {
					startTurn()
				}
				m = turn
			} else {
				turn = nil
				m = &sessiondv1.Message{}
				switch role {
				case "user":
					m.Role = sessiondv1.Role_ROLE_USER
				case "system":
					m.Role = sessiondv1.Role_ROLE_SYSTEM
				case "developer":
					m.Role = sessiondv1.Role_ROLE_SYSTEM
					setMeta(m, respRole, "developer")
				case "":
					return nil, fmt.Errorf("%s: missing", o.field("role"))
				default:
					return nil, fmt.Errorf("%s: %q is not user, assistant, system or developer", o.field("role"), role)
				}
				s.Messages = append(s.Messages, m)
			}
			at = len(s.Messages) - 1
			if err := respIDs(o, m, respMessageID, respMessageState); err != nil {
				return nil, err
			}
			if err := respContentIn(o, "content", m); err != nil {
				return nil, err
			}
		case "reasoning":
			m := startTurn()
			at = len(s.Messages) - 1
			m.Reasoning = &sessiondv1.Reasoning{}
			id, err := o.str("id")
			if err != nil {
				return nil, err
			}
			if id != "" {
				setMeta(m, respReasoningID, id)
			}
			summary, err := o.list("summary")
			if err != nil {
				return nil, err
			}
			var texts []string
			for j, r := range summary {
				p, err := parseObj(fmt.Sprintf("%s[%d]", o.field("summary"), j), r)
				if err != nil {
					return nil, err
				}
				t, err := p.str("text")
				if err != nil {
					return nil, err
				}
				if typ, _ := p.str("type"); typ != "summary_text" {
					ws.add(p.field("type"), at, "summary part %q is not understood; read as text", typ)
				}
				p.unknown(ws, at)
				texts = append(texts, t)
			}
			if len(texts) > 1 {
				ws.add(o.field("summary"), at, "%d summary parts joined into one reasoning text", len(texts))
			}
			m.Reasoning.Text = strings.Join(texts, "\n\n")
			if m.Reasoning.Signature, err = o.str("encrypted_content"); err != nil {
				return nil, err
			}
		case "function_call":
			if turn == nil {
				startTurn()
			}
			at = len(s.Messages) - 1
			tc := &sessiondv1.ToolCall{}
			if tc.Id, err = o.str("call_id"); err != nil {
				return nil, err
			}
			if tc.Name, err = o.str("name"); err != nil {
				return nil, err
			}
			if tc.Arguments, err = o.str("arguments"); err != nil {
				return nil, err
			}
			if err := respIDs(o, turn, respCallKey(tc.Id, "id"), respCallKey(tc.Id, "status")); err != nil {
				return nil, err
			}
			turn.ToolCalls = append(turn.ToolCalls, tc)
		case "function_call_output":
			turn = nil
			m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL}
			if m.ToolCallId, err = o.str("call_id"); err != nil {
				return nil, err
			}
			if err := respIDs(o, m, respOutputID, respOutputState); err != nil {
				return nil, err
			}
			if err := respContentIn(o, "output", m); err != nil {
				return nil, err
			}
			s.Messages = append(s.Messages, m)
			at = len(s.Messages) - 1
		default:
			for k := range o.m {
				o.used[k] = true
			}
			ws.add(o.path, at, "item type %q is not understood; dropped", typ)
		}
		o.unknown(ws, at)
	}
	keepParams(OpenAIResponses, top, s)
	return s, nil
}

// respIDs keeps an item's id and status in the message's metadata.
func respIDs(o *jobj, m *sessiondv1.Message, idKey, statusKey string) error {
	for _, f := range []struct{ json, key string }{{"id", idKey}, {"status", statusKey}} {
		v, err := o.str(f.json)
		if err != nil {
			return err
		}
		if v != "" {
			setMeta(m, f.key, v)
		}
	}
	return nil
}

// respContentIn reads an item's key that holds either a string (the
// message's content) or a content array (its parts); absent leaves both
// empty.
func respContentIn(o *jobj, key string, m *sessiondv1.Message) error {
	c := o.raw(key)
	if isString(c) {
		_ = json.Unmarshal(c, &m.Content)
		return nil
	}
	if c == nil {
		return nil
	}
	parts, err := respPartsIn(o.field(key), c)
	if err != nil {
		return err
	}
	m.Parts = parts
	return nil
}

// respPartsIn reads a content array: input_text and output_text (without
// annotations) become text parts, data-URL input_image parts become
// blobs, and anything else is kept as a JSON part.
func respPartsIn(path string, raw json.RawMessage) ([]*sessiondv1.ContentPart, error) {
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
		case "input_text", "output_text":
			t, err := p.str("text")
			if err != nil {
				return nil, err
			}
			rest := p.rest()
			plain := len(rest) == 0 || typ == "output_text" && len(rest) == 1 && rest[0] == "annotations" && compact(p.m["annotations"]) == "[]"
			if plain {
				parts = append(parts, textPart(t))
				continue
			}
		case "input_image":
			u, err := p.str("image_url")
			if err != nil {
				return nil, err
			}
			detail, err := p.str("detail")
			if err != nil {
				return nil, err
			}
			if len(p.rest()) == 0 && (detail == "" || detail == "auto") {
				if b, ok := parseDataURL(u); ok {
					parts = append(parts, blobPart(b))
					continue
				}
			}
		case "":
			return nil, fmt.Errorf("%s: missing", p.field("type"))
		}
		parts = append(parts, jsonPart(r))
	}
	return parts, nil
}

func exportResponses(s *sessiondv1.Session, _ ExportOptions, doc obj, ws *warnings) (obj, error) {
	items := make([]any, 0, len(s.GetMessages()))
	for i, m := range s.GetMessages() {
		md := m.GetMetadata()
		keep := []string{respInstructions, respRole, respMessageID, respMessageState, respReasoningID, respOutputID, respOutputState, respInputString}
		for _, tc := range m.GetToolCalls() {
			keep = append(keep, respCallKey(tc.GetId(), "id"), respCallKey(tc.GetId(), "status"))
		}
		messageDrops(OpenAIResponses, i, m, ws, keep...)
		roleDrops(OpenAIResponses, i, m, ws, "tool messages")
		p := &partWriter{f: OpenAIResponses, ws: ws, at: i,
			text: func(s string) obj { return obj{{"type", "input_text"}, {"text", s}} }, blob: respBlob}
		message := func(role string) obj {
			item := obj{{"type", "message"}}.with("id", md[respMessageID]).with("status", md[respMessageState])
			return append(item, kv{"role", role}, kv{"content", stringOrBlocks(m, p)})
		}
		switch m.GetRole() {
		case sessiondv1.Role_ROLE_SYSTEM:
			if md[respInstructions] == "true" && i == 0 && len(m.GetParts()) == 0 {
				doc = append(doc, kv{"instructions", m.GetContent()})
				continue
			}
			role := "system"
			if md[respRole] == "developer" {
				role = "developer"
			}
			items = append(items, message(role))
		case sessiondv1.Role_ROLE_USER:
			if md[respInputString] == "true" && i == len(s.GetMessages())-1 && len(items) == 0 && len(m.GetParts()) == 0 {
				return append(doc, kv{"input", m.GetContent()}), nil
			}
			items = append(items, message("user"))
		case sessiondv1.Role_ROLE_ASSISTANT:
			if r := m.GetReasoning(); r != nil && md[respReasoningID] == "" {
				ws.add("message.reasoning", i, "openai-responses takes back only reasoning items it made (with their id); dropped")
			} else if r != nil {
				summary := []any{}
				if r.GetText() != "" {
					summary = append(summary, obj{{"type", "summary_text"}, {"text", r.GetText()}})
				}
				items = append(items, obj{{"type", "reasoning"}, {"id", md[respReasoningID]}, {"summary", summary}}.
					with("encrypted_content", r.GetSignature()))
			}
			switch {
			case m.GetContent() == "" && len(m.GetParts()) == 0:
			case md[respMessageID] != "":
				// An output message of the API's, given back whole.
				p.text = func(s string) obj { return obj{{"type", "output_text"}, {"text", s}, {"annotations", []any{}}} }
				p.blob = nil // an assistant's output holds text only
				items = append(items, message("assistant"))
			default:
				// Any other assistant turn is an easy input message, whose
				// content is text.
				items = append(items, obj{{"type", "message"}, {"role", "assistant"}, {"content", assistantText(i, m, ws)}})
			}
			for _, tc := range m.GetToolCalls() {
				item := obj{{"type", "function_call"}}.with("id", md[respCallKey(tc.GetId(), "id")])
				item = append(item, kv{"call_id", tc.GetId()}, kv{"name", tc.GetName()}, kv{"arguments", tc.GetArguments()})
				items = append(items, item.with("status", md[respCallKey(tc.GetId(), "status")]))
			}
		case sessiondv1.Role_ROLE_TOOL:
			if m.GetToolCallId() == "" {
				ws.add("message.tool_call_id", i, "empty; openai-responses requires a call_id on a function_call_output")
			}
			item := obj{{"type", "function_call_output"}}.with("id", md[respOutputID])
			item = append(item, kv{"call_id", m.GetToolCallId()}, kv{"output", stringOrBlocks(m, p)})
			items = append(items, item.with("status", md[respOutputState]))
		default:
			return nil, fmt.Errorf("message %d: role %s has no openai-responses item", i, m.GetRole())
		}
	}
	return append(doc, kv{"input", items}), nil
}

// respBlob writes images as input_image data URLs.
func respBlob(b *sessiondv1.Blob) (obj, bool) {
	if strings.HasPrefix(b.GetMimeType(), "image/") {
		return obj{{"type", "input_image"}, {"image_url", dataURL(b)}, {"detail", "auto"}}, true
	}
	return nil, false
}

// assistantText is an assistant message's text: its content and text
// parts, joined by blank lines (warned when there is more than one).
func assistantText(i int, m *sessiondv1.Message, ws *warnings) string {
	var texts []string
	if m.GetContent() != "" {
		texts = append(texts, m.GetContent())
	}
	for _, p := range m.GetParts() {
		if t, ok := p.GetKind().(*sessiondv1.ContentPart_Text); ok {
			texts = append(texts, t.Text)
		} else {
			ws.add("message.parts", i, "openai-responses takes only text from an assistant turn it did not make; a non-text part dropped")
		}
	}
	if len(texts) > 1 {
		ws.add("message.parts", i, "openai-responses takes one text from an assistant turn it did not make; %d texts joined", len(texts))
	}
	return strings.Join(texts, "\n\n")
}

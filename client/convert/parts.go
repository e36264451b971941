package convert

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// dataURL writes a blob as a data: URL.
func dataURL(b *sessiondv1.Blob) string {
	return "data:" + b.GetMimeType() + ";base64," + base64.StdEncoding.EncodeToString(b.GetData())
}

// parseDataURL reads a base64 data: URL.
func parseDataURL(s string) (*sessiondv1.Blob, bool) {
	rest, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return nil, false
	}
	mime, data, ok := strings.Cut(rest, ";base64,")
	if !ok || mime == "" {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, false
	}
	return &sessiondv1.Blob{MimeType: mime, Data: b}, true
}

func textPart(s string) *sessiondv1.ContentPart {
	return &sessiondv1.ContentPart{Kind: &sessiondv1.ContentPart_Text{Text: s}}
}

func blobPart(b *sessiondv1.Blob) *sessiondv1.ContentPart {
	return &sessiondv1.ContentPart{Kind: &sessiondv1.ContentPart_Blob{Blob: b}}
}

// jsonPart keeps a content part this package does not map as it came.
func jsonPart(raw json.RawMessage) *sessiondv1.ContentPart {
	return &sessiondv1.ContentPart{Kind: &sessiondv1.ContentPart_Json{Json: compact(raw)}}
}

// typedJSON returns a JSON part's object and its "type" when it is an
// object with a string "type", the shape of a content part of every format
// here: an export writes such a part back as it is when the type is one of
// the format's blocks.
func typedJSON(s string) (json.RawMessage, string, bool) {
	var probe struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal([]byte(s), &probe); err != nil || probe.Type == nil {
		return nil, "", false
	}
	return json.RawMessage(s), *probe.Type, true
}

// blockTypes are the content part types of each format that an export
// writes back from a JSON part as they are.
var blockTypes = map[Format][]string{
	OpenAIChat:      {"text", "image_url", "input_audio", "file", "refusal"},
	OpenAIResponses: {"input_text", "output_text", "input_image", "input_file", "refusal"},
	Anthropic: {"text", "image", "document", "search_result", "thinking", "redacted_thinking", "tool_use", "tool_result",
		"server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"mcp_tool_use", "mcp_tool_result", "container_upload"},
}

// partWriter writes a message's content (its content string, then its
// parts) as a format's content blocks.
type partWriter struct {
	f      Format
	ws     *warnings
	at     int
	text   func(s string) obj
	blob   func(b *sessiondv1.Blob) (obj, bool) // false: the format has no block for it
	blocks []any
}

func (p *partWriter) content(m *sessiondv1.Message) []any {
	if m.GetContent() != "" {
		p.blocks = append(p.blocks, p.text(m.GetContent()))
	}
	for _, part := range m.GetParts() {
		switch k := part.GetKind().(type) {
		case *sessiondv1.ContentPart_Text:
			p.blocks = append(p.blocks, p.text(k.Text))
		case *sessiondv1.ContentPart_Json:
			raw, typ, ok := typedJSON(k.Json)
			switch {
			case ok && slices.Contains(blockTypes[p.f], typ):
				p.blocks = append(p.blocks, raw)
			case ok:
				p.ws.add("message.parts.json", p.at, "a %q block is not one of %s's; dropped", typ, p.f)
			default:
				p.ws.add("message.parts.json", p.at, "%s has no JSON block; sent as a text block", p.f)
				p.blocks = append(p.blocks, p.text(k.Json))
			}
		case *sessiondv1.ContentPart_Blob:
			if p.blob != nil {
				if o, ok := p.blob(k.Blob); ok {
					p.blocks = append(p.blocks, o)
					continue
				}
			}
			p.ws.add("message.parts.blob", p.at, "%s has no block for %s here; dropped", p.f, k.Blob.GetMimeType())
		default:
			p.ws.add("message.parts", p.at, "an empty part; dropped")
		}
	}
	return p.blocks
}

// stringOrBlocks is a message's content as a JSON string when it is only
// text, else as blocks.
func stringOrBlocks(m *sessiondv1.Message, p *partWriter) any {
	if len(m.GetParts()) == 0 {
		return m.GetContent()
	}
	return p.content(m)
}

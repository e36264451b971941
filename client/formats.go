package client

import (
	"maps"

	"github.com/sessiond/sessiond/client/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Export writes the handle's conversation (its Messages(), saved or not,
// local system messages included) as the request body of another tool,
// ready to send to a model:
//
//	body, _, err := h.Export(convert.OpenAIChat, convert.ExportOptions{Model: "gpt-4.1"})
//	resp, err := http.Post("https://api.openai.com/v1/chat/completions", "application/json", bytes.NewReader(body))
//
// f is convert.OpenAIChat (a Chat Completions body), convert.OpenAIResponses
// (a Responses API body with input items), convert.Anthropic (a Messages API
// body) or convert.JSONL (sessionctl's lossless export). The session's
// title, summary and metadata go along, so the warnings name what the
// format could not hold; request parameters an import kept in the metadata
// ("anthropic.max_tokens"...) come back in the body. Safe for concurrent
// use, like every Handle method; it does not talk to the daemon.
func (h *Handle) Export(f convert.Format, o convert.ExportOptions) ([]byte, []convert.Warning, error) {
	msgs := h.Messages()
	h.mu.Lock()
	s := &sessiondv1.Session{
		Id:           h.id,
		Namespace:    h.c.namespace,
		Alias:        h.alias,
		Title:        h.title,
		TitleDerived: h.titleDerived,
		Summary:      h.summary,
		Metadata:     maps.Clone(h.metadata),
		Revision:     h.revision,
		Messages:     msgs,
		MessageCount: int64(len(msgs)),
	}
	h.mu.Unlock()
	return convert.Export(f, s, o)
}

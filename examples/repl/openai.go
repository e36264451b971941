package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// chatModel is an OpenAI-compatible chat completions endpoint (OpenAI, a
// llama.cpp or vLLM server, Ollama): POST {baseURL}/chat/completions with
// "stream": true, read as server-sent events.
type chatModel struct {
	endpoint string // {baseURL}/chat/completions
	apiKey   string // sent as "Authorization: Bearer" when set
	model    string
	client   *http.Client
}

// newChatModel checks baseURL (http or https, with a host) and returns the
// model it serves.
func newChatModel(baseURL, apiKey, model string) (*chatModel, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--openai-base-url %q: want an http or https URL such as https://api.openai.com/v1", baseURL)
	}
	if model == "" {
		return nil, errors.New("--model is required with --openai-base-url (the endpoint's model name, such as gpt-4o-mini)")
	}
	return &chatModel{
		endpoint: strings.TrimSuffix(u.String(), "/") + "/chat/completions",
		apiKey:   apiKey,
		model:    model,
		client:   &http.Client{},
	}, nil
}

// The request and the stream's chunks, as far as the REPL reads them.
type (
	chatMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	chatRequest struct {
		Model         string        `json:"model"`
		Messages      []chatMessage `json:"messages"`
		Stream        bool          `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	chatUsage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
	chatChunk struct {
		Model   string `json:"model"`
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
				// Reasoning models served by llama.cpp, vLLM and
				// others stream their thinking here.
				ReasoningContent string `json:"reasoning_content"`
			} `json:"delta"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
		Error *apiError  `json:"error"`
	}
	apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
)

// reply is a streamed answer: what the model wrote and what the endpoint
// reported about it.
type reply struct {
	content, reasoning string
	model              string
	finishReason       string
	usage              *sessiondv1.Usage
}

// message is the reply as the assistant message to store.
func (r *reply) message() *sessiondv1.Message {
	m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: r.content, Model: r.model, Usage: r.usage}
	if r.reasoning != "" {
		m.Reasoning = &sessiondv1.Reasoning{Text: r.reasoning}
	}
	if r.finishReason != "" && r.finishReason != "stop" {
		m.Metadata = map[string]string{"finish_reason": r.finishReason}
	}
	return m
}

// chatHistory is the conversation as chat messages: the text of system,
// user and assistant messages. Tool calls and their results are left out
// (the REPL offers the model no tools).
func chatHistory(msgs []*sessiondv1.Message) []chatMessage {
	out := make([]chatMessage, 0, len(msgs))
	for _, m := range msgs {
		var role string
		switch m.GetRole() {
		case sessiondv1.Role_ROLE_SYSTEM:
			role = "system"
		case sessiondv1.Role_ROLE_USER:
			role = "user"
		case sessiondv1.Role_ROLE_ASSISTANT:
			role = "assistant"
		default:
			continue
		}
		if m.GetContent() == "" {
			continue
		}
		out = append(out, chatMessage{Role: role, Content: m.GetContent()})
	}
	return out
}

// stream asks the model to answer msgs, writing the answer's text to w as
// it arrives. When ctx ends mid-answer it returns what came so far with
// finishReason "interrupted" and ctx's error.
func (c *chatModel) stream(ctx context.Context, msgs []*sessiondv1.Message, w io.Writer) (*reply, error) {
	req := chatRequest{Model: c.model, Messages: chatHistory(msgs), Stream: true}
	req.StreamOptions.IncludeUsage = true
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("model at %s: %w", c.endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("model at %s: %s: %s", c.endpoint, resp.Status, errorText(resp.Body))
	}

	r := &reply{model: c.model}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
			continue // other fields (event, id, retry) and comments
		}
		if len(data) == 0 {
			continue
		}
		payload := strings.Join(data, "\n")
		data = data[:0]
		if payload == "[DONE]" {
			return r, nil
		}
		if err := r.add(payload, w); err != nil {
			return nil, fmt.Errorf("model at %s: %w", c.endpoint, err)
		}
	}
	if err := ctx.Err(); err != nil {
		r.finishReason = "interrupted"
		return r, err
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("model at %s: reading the answer: %w", c.endpoint, err)
	}
	if r.finishReason == "" {
		return nil, fmt.Errorf("model at %s: the answer ended before its end (no finish_reason and no [DONE])", c.endpoint)
	}
	return r, nil
}

// reasoningWriter is a stream's writer that takes the reasoning text too:
// a live turn stores it, the terminal shows only the answer.
type reasoningWriter interface{ WriteReasoning(text string) }

// add reads one chunk into r, writing its text to w (and its reasoning, if
// w is a reasoningWriter).
func (r *reply) add(payload string, w io.Writer) error {
	var ch chatChunk
	if err := json.Unmarshal([]byte(payload), &ch); err != nil {
		return fmt.Errorf("a chunk that is not JSON: %.200q", payload)
	}
	if ch.Error != nil {
		return fmt.Errorf("the endpoint reported: %s", ch.Error.Message)
	}
	if ch.Model != "" {
		r.model = ch.Model
	}
	for _, c := range ch.Choices {
		if c.Delta.ReasoningContent != "" {
			r.reasoning += c.Delta.ReasoningContent
			if rw, ok := w.(reasoningWriter); ok {
				rw.WriteReasoning(c.Delta.ReasoningContent)
			}
		}
		if c.Delta.Content != "" {
			r.content += c.Delta.Content
			_, _ = io.WriteString(w, c.Delta.Content)
		}
		if c.FinishReason != "" {
			r.finishReason = c.FinishReason
		}
	}
	if u := ch.Usage; u != nil {
		r.usage = &sessiondv1.Usage{
			InputTokens:       u.PromptTokens,
			OutputTokens:      u.CompletionTokens,
			CachedInputTokens: u.PromptTokensDetails.CachedTokens,
			ReasoningTokens:   u.CompletionTokensDetails.ReasoningTokens,
		}
	}
	return nil
}

// errorText is the message of an error answer: its JSON error's message,
// else the start of its body.
func errorText(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && len(e.Error) > 0 {
		var obj apiError
		if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil && s != "" {
			return s // Ollama and llama.cpp may send a plain string
		}
	}
	text := strings.TrimSpace(string(b))
	if len(text) > 300 {
		text = text[:300] + "..."
	}
	if text == "" {
		return "no details"
	}
	return text
}

// Package convert turns a sessiond conversation into the request shapes of
// other tools and back: OpenAI Chat Completions request bodies
// ([OpenAIChat]), OpenAI Responses API input items ([OpenAIResponses]),
// Anthropic Messages API request bodies ([Anthropic]), and sessionctl's
// lossless JSON lines export ([JSONL]).
//
// It depends only on the generated sessiond types and the standard
// library's JSON, so the Go SDK, sessionctl and any program can use it
// without the daemon.
//
// # What a format cannot hold
//
// No conversion drops anything silently. [Export] returns a [Warning] for
// each field of the session it could not write (metadata, usage, blobs of a
// kind the format has no block for, reasoning signatures, author names...),
// and [Import] returns one for each field of the input it did not
// understand. Session ids, aliases, namespaces, revisions and the message
// ids and times the store assigns are bookkeeping, not conversation: they
// are not carried by the three API formats and not warned about (JSONL
// keeps them).
//
// Request parameters of the input that are not conversation (max_tokens,
// temperature, tools...) are kept in the session's metadata under
// "FORMAT.NAME" as their JSON text, and an export to the same format puts
// them back, so that a request body survives import then export.
//
// # Concurrency
//
// Every function is safe for concurrent use; none keeps state.
package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Format names a conversation format.
type Format string

// The formats this package reads and writes.
const (
	// JSONL is sessionctl's lossless export: JSON lines carrying each
	// session and message as proto3 JSON plus its protobuf bytes.
	JSONL Format = "jsonl"
	// OpenAIChat is an OpenAI Chat Completions request body.
	OpenAIChat Format = "openai-chat"
	// OpenAIResponses is an OpenAI Responses API request body whose input
	// is a list of items.
	OpenAIResponses Format = "openai-responses"
	// Anthropic is an Anthropic Messages API request body.
	Anthropic Format = "anthropic"
)

// Formats lists every format, in the order the docs name them.
func Formats() []Format { return []Format{OpenAIChat, OpenAIResponses, Anthropic, JSONL} }

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, 0, 4)
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return "", fmt.Errorf("unknown format %q; use one of %s", s, strings.Join(names, ", "))
}

// ExportOptions tunes [Export].
type ExportOptions struct {
	// Model is the request body's model. When empty: the model an import
	// recorded in the session's metadata for this format, else the model
	// of the newest message that names one, else Session.models[0].
	Model string
	// MaxTokens, when above zero, is the request's output token limit:
	// max_tokens for anthropic (which requires one), max_completion_tokens
	// for openai-chat, max_output_tokens for openai-responses. Zero leaves
	// it as an import of the same format kept it, or out.
	MaxTokens int64
}

// maxTokensKey names the output token limit in each format's request.
var maxTokensKey = map[Format]string{Anthropic: "max_tokens", OpenAIChat: "max_completion_tokens", OpenAIResponses: "max_output_tokens"}

// Warning names what a conversion could not carry: a field of the session
// that an export dropped, or a field of the input that an import did not
// understand.
type Warning struct {
	// Field is the field, as a sessiond path for an export
	// ("message.reasoning.signature", "session.labels") or as a JSON path
	// of the input for an import ("messages[2].refusal").
	Field string `json:"field"`
	// Count is how many messages (or items) had it; 1 for a session field.
	Count int `json:"count"`
	// First is the index of the first message with it, or -1 for a field of
	// the session or of the request as a whole.
	First int `json:"first"`
	// Reason says what happened to it.
	Reason string `json:"reason"`
}

func (w Warning) String() string {
	switch {
	case w.First < 0:
		return fmt.Sprintf("%s: %s", w.Field, w.Reason)
	case w.Count == 1:
		return fmt.Sprintf("%s: %s (message %d)", w.Field, w.Reason, w.First)
	default:
		return fmt.Sprintf("%s: %s (%d messages, the first is %d)", w.Field, w.Reason, w.Count, w.First)
	}
}

// warnings collects warnings, one per field and reason, counting repeats.
type warnings struct {
	list []*Warning
	idx  map[string]*Warning
}

func (ws *warnings) add(field string, first int, format string, a ...any) {
	reason := fmt.Sprintf(format, a...)
	key := field + "\x00" + reason
	if w, ok := ws.idx[key]; ok {
		w.Count++
		return
	}
	if ws.idx == nil {
		ws.idx = map[string]*Warning{}
	}
	w := &Warning{Field: field, Count: 1, First: first, Reason: reason}
	ws.idx[key] = w
	ws.list = append(ws.list, w)
}

func (ws *warnings) result() []Warning {
	out := make([]Warning, len(ws.list))
	for i, w := range ws.list {
		out[i] = *w
	}
	return out
}

// Export writes session s (with its messages) in format f. It returns the
// document, indented JSON ending in a newline, and what it could not carry.
func Export(f Format, s *sessiondv1.Session, o ExportOptions) ([]byte, []Warning, error) {
	if s == nil {
		return nil, nil, fmt.Errorf("export %s: no session", f)
	}
	var body func(*sessiondv1.Session, ExportOptions, obj, *warnings) (obj, error)
	switch f {
	case JSONL:
		var buf bytes.Buffer
		if err := WriteJSONL(&buf, s, "convert"); err != nil {
			return nil, nil, err
		}
		return buf.Bytes(), nil, nil
	case OpenAIChat:
		body = exportChat
	case OpenAIResponses:
		body = exportResponses
	case Anthropic:
		body = exportAnthropic
	default:
		_, err := ParseFormat(string(f))
		return nil, nil, fmt.Errorf("export %s: %w", f, err)
	}
	// Every API format starts with the model and ends with the output
	// token limit and the parameters an import kept.
	var ws warnings
	sessionDrops(f, s, &ws)
	doc, err := body(s, o, obj{}.with("model", model(f, s, o, &ws)), &ws)
	if err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", f, err)
	}
	if o.MaxTokens > 0 {
		// Before the kept parameters, so that it wins over a kept one.
		doc = append(doc, kv{maxTokensKey[f], o.MaxTokens})
	}
	b, err := json.MarshalIndent(restoreParams(f, s, doc), "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", f, err)
	}
	return append(b, '\n'), ws.result(), nil
}

// Import reads one conversation in format f into a new session: its
// messages, and its request parameters as metadata. The session has no id,
// namespace or alias; the caller creates it where it wants. A JSONL input
// must hold exactly one session, which keeps its identity.
func Import(f Format, data []byte) (*sessiondv1.Session, []Warning, error) {
	var ws warnings
	var s *sessiondv1.Session
	var err error
	switch f {
	case JSONL:
		s, err = importJSONL(data)
	case OpenAIChat:
		s, err = importChat(data, &ws)
	case OpenAIResponses:
		s, err = importResponses(data, &ws)
	case Anthropic:
		s, err = importAnthropic(data, &ws)
	default:
		_, err = ParseFormat(string(f))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("import %s: %w", f, err)
	}
	return s, ws.result(), nil
}

// kv and obj write a JSON object with its keys in the order given, so
// that exports read like the formats' documentation.
type kv struct {
	k string
	v any
}

type obj []kv

// with appends k: v, unless v is empty: for the keys a format leaves out
// when they have no value.
func (o obj) with(k, v string) obj {
	if v == "" {
		return o
	}
	return append(o, kv{k, v})
}

func (o obj) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(e.k)
		buf.Write(k)
		buf.WriteByte(':')
		v, err := json.Marshal(e.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.k, err)
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// jobj is an input object whose keys are read one by one, so that the
// keys nobody read can be reported.
type jobj struct {
	path string
	m    map[string]json.RawMessage
	used map[string]bool
}

func parseObj(path string, raw json.RawMessage) (*jobj, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%s: not a JSON object", pathOr(path))
	}
	return &jobj{path: path, m: m, used: map[string]bool{}}, nil
}

func pathOr(p string) string {
	if p == "" {
		return "the document"
	}
	return p
}

func (o *jobj) field(k string) string {
	if o.path == "" {
		return k
	}
	return o.path + "." + k
}

// has reports whether k is present and not null.
func (o *jobj) has(k string) bool {
	v, ok := o.m[k]
	return ok && !isNull(v)
}

func (o *jobj) raw(k string) json.RawMessage {
	o.used[k] = true
	v := o.m[k]
	if isNull(v) {
		return nil
	}
	return v
}

func (o *jobj) str(k string) (string, error) {
	v := o.raw(k)
	if v == nil {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%s: not a string", o.field(k))
	}
	return s, nil
}

func (o *jobj) list(k string) ([]json.RawMessage, error) {
	v := o.raw(k)
	if v == nil {
		return nil, nil
	}
	var l []json.RawMessage
	if err := json.Unmarshal(v, &l); err != nil {
		return nil, fmt.Errorf("%s: not an array", o.field(k))
	}
	return l, nil
}

// unknown warns about every key nobody read, at message index at.
func (o *jobj) unknown(ws *warnings, at int) {
	for _, k := range o.rest() {
		ws.add(o.field(k), at, "not understood; dropped")
	}
}

// rest lists the keys nobody read, sorted.
func (o *jobj) rest() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k, v := range o.m {
			if !o.used[k] && !isNull(v) && !yield(k) {
				return
			}
		}
	})
}

func isNull(v json.RawMessage) bool {
	return len(v) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// isString tells a JSON string from an array or object.
func isString(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && v[0] == '"'
}

func compact(v json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return string(v)
	}
	return buf.String()
}

// keepParams records the request's top-level keys nobody read in the
// session's metadata as "FORMAT.KEY" = their JSON text.
func keepParams(f Format, o *jobj, s *sessiondv1.Session) {
	for _, k := range o.rest() {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		s.Metadata[string(f)+"."+k] = compact(o.m[k])
	}
}

// restoreParams appends the parameters keepParams recorded for f, sorted,
// skipping the keys the export already wrote.
func restoreParams(f Format, s *sessiondv1.Session, doc obj) obj {
	prefix := string(f) + "."
	for _, k := range slices.Sorted(maps.Keys(s.GetMetadata())) {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok || slices.ContainsFunc(doc, func(e kv) bool { return e.k == name }) {
			continue
		}
		v := s.GetMetadata()[k]
		if json.Valid([]byte(v)) {
			doc = append(doc, kv{name, json.RawMessage(v)})
		} else {
			doc = append(doc, kv{name, v})
		}
	}
	return doc
}

// model picks the request's model (see ExportOptions.Model).
func model(f Format, s *sessiondv1.Session, o ExportOptions, ws *warnings) string {
	if o.Model != "" {
		return o.Model
	}
	if v, ok := s.GetMetadata()[string(f)+".model"]; ok {
		var m string
		if json.Unmarshal([]byte(v), &m) == nil && m != "" {
			return m
		}
	}
	msgs := s.GetMessages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i].GetModel(); m != "" {
			return m
		}
	}
	if len(s.GetModels()) > 0 {
		return s.GetModels()[0]
	}
	ws.add("model", -1, "the session names no model; the request has none (give one)")
	return ""
}

// sessionDrops warns about the session's fields no API format holds, and
// about metadata that is not a parameter kept for f.
func sessionDrops(f Format, s *sessiondv1.Session, ws *warnings) {
	not := "not held by " + string(f) + "; dropped"
	if s.GetTitle() != "" && !s.GetTitleDerived() { // a derived title comes back from the first user message
		ws.add("session.title", -1, "%s", not)
	}
	if s.GetSummary() != "" {
		ws.add("session.summary", -1, "%s", not)
	}
	if len(s.GetLabels()) > 0 {
		ws.add("session.labels", -1, "%s", not)
	}
	if s.GetParent() != nil {
		ws.add("session.parent", -1, "%s", not)
	}
	if s.GetExpireAfter() != nil {
		ws.add("session.expire_after", -1, "%s", not)
	}
	dropped := slices.DeleteFunc(slices.Sorted(maps.Keys(s.GetMetadata())), func(k string) bool { return strings.HasPrefix(k, string(f)+".") })
	if len(dropped) > 0 {
		ws.add("session.metadata", -1, "%s (keys %s)", not, strings.Join(dropped, ", "))
	}
}

// messageDrops warns about the fields of message i that no API format
// holds, and about metadata keys other than the ones f reads back (keep).
func messageDrops(f Format, i int, m *sessiondv1.Message, ws *warnings, keep ...string) {
	not := "not held by " + string(f) + "; dropped"
	if m.GetModel() != "" {
		ws.add("message.model", i, "%s", not)
	}
	if m.GetUsage() != nil {
		ws.add("message.usage", i, "%s", not)
	}
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		ws.add("message (fields unknown to this version)", i, "%s", not)
	}
	for k := range m.GetMetadata() {
		if !slices.Contains(keep, k) {
			ws.add("message.metadata["+k+"]", i, "%s", not)
		}
	}
}

// roleDrops warns about message i's name, which f does not hold, and
// about the fields f holds only on other roles (tools names the messages
// that carry a tool_call_id).
func roleDrops(f Format, i int, m *sessiondv1.Message, ws *warnings, tools string) {
	if m.GetName() != "" {
		ws.add("message.name", i, "not held by %s; dropped", f)
	}
	if m.GetToolCallId() != "" && m.GetRole() != sessiondv1.Role_ROLE_TOOL {
		ws.add("message.tool_call_id", i, "only %s carry one in %s; dropped", tools, f)
	}
	if len(m.GetToolCalls()) > 0 && m.GetRole() != sessiondv1.Role_ROLE_ASSISTANT {
		ws.add("message.tool_calls", i, "only assistant messages carry them in %s; dropped", f)
	}
	if m.GetReasoning() != nil && m.GetRole() != sessiondv1.Role_ROLE_ASSISTANT {
		ws.add("message.reasoning", i, "only assistant messages carry it in %s; dropped", f)
	}
}

func setMeta(m *sessiondv1.Message, k, v string) {
	if m.Metadata == nil {
		m.Metadata = map[string]string{}
	}
	m.Metadata[k] = v
}

// messagesOf reads the request's conversation array.
func messagesOf(top *jobj, key string) ([]json.RawMessage, error) {
	if !top.has(key) {
		return nil, fmt.Errorf("%s: missing; a conversation needs it", key)
	}
	return top.list(key)
}

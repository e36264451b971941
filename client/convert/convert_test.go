package convert_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sessiond/sessiond/client/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// fixture reads testdata/FORMAT.json (testdata/jsonl.jsonl for JSONL).
func fixture(t *testing.T, f convert.Format) []byte {
	t.Helper()
	name := string(f) + ".json"
	if f == convert.JSONL {
		name = "jsonl.jsonl"
	}
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SameJSON fails unless want and got decode to the same JSON values (key
// order and whitespace aside). A JSONL document is compared line by line,
// with the header's export time and producer left out.
func SameJSON(t *testing.T, f convert.Format, want, got []byte) {
	t.Helper()
	if diff := cmp.Diff(decodeDoc(t, f, want), decodeDoc(t, f, got)); diff != "" {
		t.Errorf("%s: export differs from the input (-input +export):\n%s\nexport:\n%s", f, diff, got)
	}
}

func decodeDoc(t *testing.T, f convert.Format, b []byte) any {
	t.Helper()
	if f != convert.JSONL {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, b)
		}
		return v
	}
	var lines []any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var v map[string]any
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("line not JSON: %v\n%s", err, l)
		}
		if v["type"] == "sessiond-export" {
			delete(v, "exported_at")
			delete(v, "sessionctl")
		}
		lines = append(lines, v)
	}
	return lines
}

// TestRoundTrip imports each fixture, written from the format's public
// documentation, and exports it again: the same JSON must come back.
func TestRoundTrip(t *testing.T) {
	for _, f := range convert.Formats() {
		t.Run(string(f), func(t *testing.T) {
			in := fixture(t, f)
			s, warns, err := convert.Import(f, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(warns) > 0 {
				t.Errorf("import warned about a documented shape: %v", warns)
			}
			// What the daemon adds (ids, times) is bookkeeping the API
			// formats never carry: the export must not depend on it.
			for i, m := range s.GetMessages() {
				if m.Id == "" {
					m.Id = "assigned-" + string(rune('a'+i))
				}
			}
			out, warns, err := convert.Export(f, s, convert.ExportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if f != convert.JSONL && len(warns) > 0 {
				t.Errorf("export of an imported %s conversation warned: %v", f, warns)
			}
			SameJSON(t, f, in, out)
		})
	}
}

// TestImportMapping checks where the fixtures' fields land.
func TestImportMapping(t *testing.T) {
	s, _, err := convert.Import(convert.Anthropic, fixture(t, convert.Anthropic))
	if err != nil {
		t.Fatal(err)
	}
	roles := []sessiondv1.Role{}
	for _, m := range s.GetMessages() {
		roles = append(roles, m.GetRole())
	}
	const (
		sys  = sessiondv1.Role_ROLE_SYSTEM
		usr  = sessiondv1.Role_ROLE_USER
		asst = sessiondv1.Role_ROLE_ASSISTANT
		tool = sessiondv1.Role_ROLE_TOOL
	)
	if diff := cmp.Diff([]sessiondv1.Role{sys, usr, asst, tool, tool, usr, asst, usr, asst, tool}, roles); diff != "" {
		t.Fatalf("roles (-want +got):\n%s", diff)
	}
	a := s.GetMessages()[2]
	want := &sessiondv1.Message{Role: asst,
		Reasoning: &sessiondv1.Reasoning{Text: "The user wants the weather in two cities; I can call get_weather for both at once.", Signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
		Parts:     []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: "I'll check both cities."}}},
		ToolCalls: []*sessiondv1.ToolCall{
			{Id: "toolu_01A09q90qw90lq917835lq9", Name: "get_weather", Arguments: `{"location":"Paris, France"}`},
			{Id: "toolu_01B18r81rx81mr826946mr8", Name: "get_weather", Arguments: `{"location":"Bogotá, Colombia"}`},
		}}
	if diff := cmp.Diff(want, a, protocmp.Transform()); diff != "" {
		t.Errorf("assistant with thinking and parallel tool_use (-want +got):\n%s", diff)
	}
	if blob := s.GetMessages()[1].GetParts()[1].GetBlob(); blob.GetMimeType() != "image/png" || !bytes.Equal(blob.GetData(), []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("base64 image block: got blob %v", blob)
	}
	if got := s.GetMessages()[9].GetMetadata()["anthropic.is_error"]; got != "true" {
		t.Errorf("is_error tool result: metadata %v", s.GetMessages()[9].GetMetadata())
	}
	if got := s.GetMetadata()["anthropic.max_tokens"]; got != "16000" {
		t.Errorf("max_tokens kept as %q, want 16000", got)
	}

	// Responses: reasoning and two function_call items are one assistant
	// message; the outputs answer its calls.
	r, _, err := convert.Import(convert.OpenAIResponses, fixture(t, convert.OpenAIResponses))
	if err != nil {
		t.Fatal(err)
	}
	m := r.GetMessages()[2]
	if m.GetRole() != asst || len(m.GetToolCalls()) != 2 || m.GetReasoning().GetSignature() == "" || r.GetMessages()[3].GetToolCallId() != "call_12345xyz" {
		t.Errorf("responses turn: %v then %v", m, r.GetMessages()[3])
	}
	if r.GetMessages()[0].GetContent() != "You are a helpful weather assistant." {
		t.Errorf("instructions: %v", r.GetMessages()[0])
	}
}

// richSession has something in every field no API format holds.
func richSession() *sessiondv1.Session {
	s, _, err := convert.Import(convert.JSONL, mustRead("testdata/jsonl.jsonl"))
	if err != nil {
		panic(err)
	}
	return s
}

func mustRead(p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return b
}

// TestExportWarnsAboutWhatItDrops: each format names every field it
// cannot hold.
func TestExportWarnsAboutWhatItDrops(t *testing.T) {
	common := []string{"session.title", "session.summary", "session.labels", "session.expire_after",
		"session.metadata", "message.model", "message.usage", "message.metadata[latency_ms]", "message.parts.json"}
	tests := []struct {
		f    convert.Format
		want []string
	}{
		{convert.OpenAIChat, append(common, "message.reasoning.text", "message.reasoning.signature")},
		{convert.OpenAIResponses, append(common, "message.name")},
		{convert.Anthropic, append(common, "message.name", "max_tokens")},
	}
	for _, tt := range tests {
		t.Run(string(tt.f), func(t *testing.T) {
			_, warns, err := convert.Export(tt.f, richSession(), convert.ExportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]convert.Warning{}
			for _, w := range warns {
				got[w.Field] = w
			}
			for _, f := range tt.want {
				if _, ok := got[f]; !ok {
					t.Errorf("no warning for %s; got %v", f, warns)
				}
			}
			if w := got["message.usage"]; w.First != 2 || w.Count != 1 {
				t.Errorf("usage warning names message %d (count %d), want 2 (1)", w.First, w.Count)
			}
		})
	}
}

// TestExportKeepsUnknownJSONParts: a JSON part without a "type" becomes
// text, and the warning says so; a blob the format has no block for is
// named.
func TestExportBlobs(t *testing.T) {
	s := &sessiondv1.Session{Messages: []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Parts: []*sessiondv1.ContentPart{
		{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "application/zip", Data: []byte("PK")}}},
		{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "application/pdf", Data: []byte("%PDF")}}},
	}}}}
	for _, f := range []convert.Format{convert.OpenAIChat, convert.OpenAIResponses, convert.Anthropic} {
		out, warns, err := convert.Export(f, s, convert.ExportOptions{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		var zip, pdf bool
		for _, w := range warns {
			zip = zip || w.Field == "message.parts.blob" && strings.Contains(w.Reason, "application/zip")
			pdf = pdf || w.Field == "message.parts.blob" && strings.Contains(w.Reason, "application/pdf")
		}
		if !zip {
			t.Errorf("%s: dropped zip blob not named: %v", f, warns)
		}
		if wantPDF := f != convert.Anthropic; pdf != wantPDF {
			t.Errorf("%s: pdf warning %v, want %v: %v\n%s", f, pdf, wantPDF, warns, out)
		}
	}
}

func TestImportWarnsAboutUnknownFields(t *testing.T) {
	in := `{"model":"gpt-4.1","messages":[{"role":"user","content":"hi","audio":null,"mood":"happy"},
		{"role":"assistant","content":"x","refusal":"no","tool_calls":[{"id":"c","type":"custom","custom":{"name":"n","input":"i"}}]},
		{"role":"function","name":"f","content":"old"}]}`
	s, warns, err := convert.Import(convert.OpenAIChat, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	for _, w := range warns {
		fields[w.Field] = true
	}
	for _, f := range []string{"messages[0].mood", "messages[1].refusal", "messages[1].tool_calls[0].type", "messages[2]"} {
		if !fields[f] {
			t.Errorf("no warning for %s: %v", f, warns)
		}
	}
	if fields["messages[0].audio"] {
		t.Errorf("a null field is not data, yet warned: %v", warns)
	}
	if len(s.GetMessages()) != 2 {
		t.Errorf("want 2 messages (the function one dropped), got %d", len(s.GetMessages()))
	}
}

func TestImportErrors(t *testing.T) {
	tests := []struct {
		f    convert.Format
		in   string
		want string
	}{
		{convert.OpenAIChat, `[]`, "not a JSON object"},
		{convert.OpenAIChat, `{"model":"m"}`, "messages: missing"},
		{convert.OpenAIChat, `{"messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"},
		{convert.OpenAIChat, `{"messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{convert.OpenAIResponses, `{"model":"m"}`, "input: missing"},
		{convert.OpenAIResponses, `{"input":[{"type":"message","role":"robot"}]}`, "input[0].role"},
		{convert.Anthropic, `{"messages":[{"role":"system","content":"x"}]}`, "messages[0].role"},
		{convert.Anthropic, `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type"},
		{convert.JSONL, "", "empty input"},
		{convert.Format("xml"), "{}", "unknown format"},
	}
	for _, tt := range tests {
		_, _, err := convert.Import(tt.f, []byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: want an error naming %q, got %v", tt.f, tt.in, tt.want, err)
		}
	}
}

// TestAcrossFormats: a conversation imported from one format exports to
// the others with its calls and results paired.
func TestAcrossFormats(t *testing.T) {
	s, _, err := convert.Import(convert.Anthropic, fixture(t, convert.Anthropic))
	if err != nil {
		t.Fatal(err)
	}
	out, warns, err := convert.Export(convert.OpenAIChat, s, convert.ExportOptions{Model: "gpt-4.1"})
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &chat); err != nil {
		t.Fatal(err)
	}
	if chat.Model != "gpt-4.1" || len(chat.Messages) != 10 || chat.Messages[2].ToolCalls[1].Function.Arguments != `{"location":"Bogotá, Colombia"}` ||
		chat.Messages[4].ToolCallID != "toolu_01B18r81rx81mr826946mr8" {
		t.Errorf("anthropic → openai-chat:\n%s", out)
	}
	var sig bool
	for _, w := range warns {
		sig = sig || w.Field == "message.reasoning.signature"
	}
	if !sig {
		t.Errorf("the thinking signature was dropped without a warning: %v", warns)
	}

	// And back from Chat to Anthropic: the two tool results and the
	// question after them share one user message again.
	back, _, err := convert.Import(convert.OpenAIChat, out)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := convert.Export(convert.Anthropic, back, convert.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var anth struct {
		System   string `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(again, &anth); err != nil {
		t.Fatal(err)
	}
	if anth.System != "You are a helpful weather assistant." || anth.Messages[2].Role != "user" ||
		!strings.Contains(compactJSON(anth.Messages[2].Content), `"tool_use_id":"toolu_01B18r81rx81mr826946mr8"`) ||
		!strings.Contains(compactJSON(anth.Messages[2].Content), `"Which one is warmer?"`) || len(anth.Messages) != 7 {
		t.Errorf("openai-chat → anthropic:\n%s", again)
	}
}

func TestJSONLImportIsLossless(t *testing.T) {
	s := richSession()
	var buf bytes.Buffer
	if err := convert.WriteJSONL(&buf, s, "test"); err != nil {
		t.Fatal(err)
	}
	got, _, err := convert.Import(convert.JSONL, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-written +read):\n%s", diff)
	}
	two := buf.String() + buf.String()
	if _, _, err := convert.Import(convert.JSONL, []byte(two)); err == nil {
		t.Error("two files joined: want an error")
	}
	_ = proto.Size(got)
}

// TestJSONLSummary: a compacted session's summary line is read back with
// it, and one that does not match its compaction is refused.
func TestJSONLSummary(t *testing.T) {
	s := richSession()
	s.Compaction = &sessiondv1.Compaction{ThroughMessageCount: 1, ThroughMessageId: s.GetMessages()[0].GetId(), Revision: 2, SummaryMessageId: "sum"}
	write := func(sum *sessiondv1.Message) []byte {
		var buf bytes.Buffer
		x := convert.NewJSONLWriter(&buf)
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(x.Header("", "test", time.Now()))
		must(x.Session(s))
		for i, m := range s.GetMessages() {
			must(x.Message(s.GetId(), int64(i), m))
		}
		must(x.Summary(s.GetId(), sum))
		must(x.End(s.GetId(), int64(len(s.GetMessages()))))
		must(x.Trailer(1))
		return buf.Bytes()
	}
	sum := &sessiondv1.Message{Id: "sum", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "what happened"}
	r := convert.NewJSONLReader(bytes.NewReader(write(sum)))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sum, r.Summary(), protocmp.Transform()); diff != "" {
		t.Errorf("summary (-written +read):\n%s", diff)
	}
	other := &sessiondv1.Message{Id: "other", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "x"}
	r = convert.NewJSONLReader(bytes.NewReader(write(other)))
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "compaction summary \"sum\"") {
		t.Errorf("a summary that is not the compaction's: got %v, want an error naming it", err)
	}
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	_ = json.Compact(&buf, b)
	return buf.String()
}

// FuzzImport: no input makes Import panic, and whatever it accepts
// exports, in every format, as valid JSON.
func FuzzImport(f *testing.F) {
	for _, format := range convert.Formats() {
		b, err := os.ReadFile(filepath.Join("testdata", map[convert.Format]string{convert.JSONL: "jsonl.jsonl"}[format]+string(format)+".json"))
		if format == convert.JSONL {
			b, err = os.ReadFile(filepath.Join("testdata", "jsonl.jsonl"))
		}
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(0), b)
	}
	f.Add(uint8(2), []byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"!!"}}]}]}]}`))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		formats := convert.Formats()
		in := formats[int(which)%len(formats)]
		s, _, err := convert.Import(in, data)
		if err != nil {
			return
		}
		for _, out := range formats {
			b, _, err := convert.Export(out, s, convert.ExportOptions{})
			if err != nil {
				// Only a message without a role cannot be written.
				continue
			}
			if out != convert.JSONL && !json.Valid(b) {
				t.Fatalf("%s → %s: invalid JSON:\n%s", in, out, b)
			}
		}
	})
}

// TestSmallRoundTrips: shapes of the docs beyond the fixtures come back
// as they were.
func TestSmallRoundTrips(t *testing.T) {
	tests := []struct {
		f  convert.Format
		in string
	}{
		{convert.Anthropic, `{"model":"claude-sonnet-4-5","max_tokens":1024,
			"system":[{"type":"text","text":"You are an AI assistant analyzing literary works."},
			          {"type":"text","text":"<the entire contents of Pride and Prejudice>","cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"user","content":"Analyze the major themes."}]}`},
		{convert.Anthropic, `{"model":"m","max_tokens":1,"messages":[
			{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"Grass is green."}},
			                          {"type":"image","source":{"type":"url","url":"https://example.com/a.jpg"}},{"type":"text","text":"?"}]},
			{"role":"assistant","content":[{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"},{"type":"text","text":"Green."}]}]}`},
		{convert.OpenAIChat, `{"model":"gpt-4o-audio-preview","messages":[
			{"role":"system","name":"setup","content":[{"type":"text","text":"Be brief."}]},
			{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]},
			{"role":"assistant","content":[{"type":"refusal","refusal":"I cannot."}]}]}`},
		{convert.OpenAIResponses, `{"model":"gpt-4.1","input":"Tell me a three sentence bedtime story about a unicorn."}`},
		{convert.OpenAIResponses, `{"model":"gpt-4.1","input":[
			{"type":"message","role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.jpg","detail":"high"},{"type":"input_text","text":"What is this?"}]},
			{"type":"reasoning","id":"rs_1","summary":[]},
			{"type":"message","role":"assistant","content":"A cat."}]}`},
	}
	for _, tt := range tests {
		s, warns, err := convert.Import(tt.f, []byte(tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.f, err)
		}
		if len(warns) > 0 {
			t.Errorf("%s: import warned: %v", tt.f, warns)
		}
		out, warns, err := convert.Export(tt.f, s, convert.ExportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(warns) > 0 {
			t.Errorf("%s: export warned: %v", tt.f, warns)
		}
		SameJSON(t, tt.f, []byte(tt.in), out)
	}
}

func TestMaxTokens(t *testing.T) {
	s, _, err := convert.Import(convert.Anthropic, fixture(t, convert.Anthropic))
	if err != nil {
		t.Fatal(err)
	}
	for f, key := range map[convert.Format]string{convert.Anthropic: "max_tokens", convert.OpenAIChat: "max_completion_tokens", convert.OpenAIResponses: "max_output_tokens"} {
		out, warns, err := convert.Export(f, s, convert.ExportOptions{MaxTokens: 2048})
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		if err := json.Unmarshal(out, &body); err != nil {
			t.Fatal(err)
		}
		if body[key] != float64(2048) {
			t.Errorf("%s: %s = %v, want 2048 (over the kept 16000)", f, key, body[key])
		}
		for _, w := range warns {
			if w.Field == "max_tokens" {
				t.Errorf("%s: warned about max_tokens although given: %v", f, w)
			}
		}
	}
}

// TestAnthropicToolRunWarnsOncePerMessage: in a run of tool results sent
// as one user message, each message is checked once: the first's name is
// counted once, and a later one's misplaced reasoning is named.
func TestAnthropicToolRunWarnsOncePerMessage(t *testing.T) {
	s := &sessiondv1.Session{Messages: []*sessiondv1.Message{
		{Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "a", Name: "f", Arguments: "{}"}, {Id: "b", Name: "f", Arguments: "{}"}}},
		{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "a", Name: "f", Content: "1"},
		{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "b", Content: "2", Reasoning: &sessiondv1.Reasoning{Text: "why"}},
	}}
	_, warns, err := convert.Export(convert.Anthropic, s, convert.ExportOptions{Model: "m", MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]convert.Warning{}
	for _, w := range warns {
		got[w.Field] = w
	}
	if w, ok := got["message.name"]; !ok || w.First != 1 || w.Count != 1 {
		t.Errorf("name warning %+v, want message 1 counted once; got %v", w, warns)
	}
	if w, ok := got["message.reasoning"]; !ok || w.First != 2 || w.Count != 1 {
		t.Errorf("reasoning warning %+v, want message 2 counted once; got %v", w, warns)
	}
}

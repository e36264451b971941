package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// formatFixture is the convert package's fixture for a format, written
// from that format's public documentation.
func formatFixture(t *testing.T, f string) string {
	t.Helper()
	return filepath.Join("..", "..", "client", "convert", "testdata", f+".json")
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

// TestImportExportFormats: each fixture imported into the real daemon as
// a new session, then exported in its format, gives the same JSON back,
// with no warning either way.
func TestImportExportFormats(t *testing.T) { eachBackend(t, testImportExportFormats) }

func testImportExportFormats(t *testing.T, d *daemon) {
	for _, f := range []string{"openai-chat", "openai-responses", "anthropic"} {
		t.Run(f, func(t *testing.T) {
			file := formatFixture(t, f)
			alias := "from-" + f
			r := must(t, d.ctl("import", "--format", f, "--alias", alias, file))
			if !strings.Contains(r.stdout, "imported "+file+" as session ") || r.stderr != "" {
				t.Errorf("import: %v", r)
			}
			out := filepath.Join(t.TempDir(), "out.json")
			r = must(t, d.ctl("export", "--format", f, alias, "--output", out))
			if r.stderr != "" {
				t.Errorf("export of an imported %s conversation warned: %s", f, r.stderr)
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(decodeJSON(t, want), decodeJSON(t, got)); diff != "" {
				t.Errorf("(-fixture +export):\n%s", diff)
			}
			// To stdout by default.
			r = must(t, d.ctl("export", "--format", f, alias))
			if diff := cmp.Diff(decodeJSON(t, got), decodeJSON(t, []byte(r.stdout))); diff != "" {
				t.Errorf("stdout differs from --output (-file +stdout):\n%s", diff)
			}
		})
	}

	// The lossless format: the fixture's session comes back with its id,
	// and its message lines (readable and protobuf halves) byte for byte.
	t.Run("jsonl", func(t *testing.T) {
		file := filepath.Join("..", "..", "client", "convert", "testdata", "jsonl.jsonl")
		must(t, d.ctl("import", "--format", "jsonl", file))
		r := must(t, d.ctl("export", "--format", "jsonl", "weather"))
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		messageLines := func(b string) []string {
			var out []string
			for _, l := range strings.Split(b, "\n") {
				if strings.HasPrefix(l, `{"type":"message"`) {
					out = append(out, l)
				}
			}
			return out
		}
		if diff := cmp.Diff(messageLines(string(want)), messageLines(r.stdout)); diff != "" || len(messageLines(r.stdout)) != 5 {
			t.Errorf("message lines (-fixture +export):\n%s", diff)
		}
		if !strings.Contains(r.stdout, `"id":"0196a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","alias":"weather","title":"Weather in two cities"`) {
			t.Errorf("session line:\n%s", r.stdout)
		}
		must(t, d.ctl("rm", "--yes", "weather"))
	})

	// A second import of the same file is a second session; the alias is
	// taken.
	r := d.ctl("import", "--format", "anthropic", "--alias", "from-anthropic", formatFixture(t, "anthropic"))
	if r.code != exitError || !strings.Contains(r.stderr, "taken") {
		t.Errorf("import under a taken alias: %v", r)
	}
	must(t, d.ctl("import", "--format", "anthropic", formatFixture(t, "anthropic")))
	ls := must(t, d.ctl("--json", "ls"))
	if n := strings.Count(ls.stdout, "\n"); n != 4 {
		t.Errorf("want 4 sessions, got %d:\n%s", n, ls.stdout)
	}
}

// TestExportFormatOpenToolCalls: a session whose assistant made two tool
// calls at once, one never answered, exports in each API format as a
// history that API accepts: every call has exactly one result, the open
// one's the daemon's synthetic "interrupted" result, with no warning about
// the daemon's marker on it, while the stored session stays as it was, the
// call still open.
func TestExportFormatOpenToolCalls(t *testing.T) { eachBackend(t, testExportFormatOpenToolCalls) }

func testExportFormatOpenToolCalls(t *testing.T, d *daemon) {
	call := text(assistant, "a1", "")
	call.ToolCalls = []*sessiondv1.ToolCall{
		{Id: "call_paris", Name: "weather", Arguments: `{"city":"Paris"}`},
		{Id: "call_oslo", Name: "weather", Arguments: `{"city":"Oslo"}`},
	}
	answer := text(toolRole, "t1", "18°C")
	answer.ToolCallId, answer.Name = "call_paris", "weather"
	created := d.create(&sessiondv1.CreateSessionRequest{Alias: "open", Messages: []*sessiondv1.Message{
		text(user, "u1", "weather in Paris and Oslo?"), call, answer,
		text(user, "u2", "never mind Oslo"), text(assistant, "a2", "Paris is at 18°C."),
	}})

	for _, f := range []string{"openai-chat", "openai-responses", "anthropic"} {
		t.Run(f, func(t *testing.T) {
			r := must(t, d.ctl("export", "--format", f, "open"))
			calls, results := exportedToolCalls(t, f, decodeJSON(t, []byte(r.stdout)))
			if !cmp.Equal(calls, []string{"call_paris", "call_oslo"}) {
				t.Errorf("tool calls %v, want [call_paris call_oslo]\n%s", calls, r.stdout)
			}
			for _, id := range calls {
				if len(results[id]) != 1 {
					t.Errorf("call %s has %d results, want exactly 1\n%s", id, len(results[id]), r.stdout)
				}
			}
			if got := results["call_paris"]; len(got) != 1 || got[0] != "18°C" {
				t.Errorf("call_paris results %q, want the stored 18°C", got)
			}
			if got := results["call_oslo"]; len(got) != 1 || !strings.Contains(got[0], "interrupted") {
				t.Errorf("call_oslo results %q, want the synthetic interrupted one", got)
			}
			if strings.Contains(r.stderr, storage.SyntheticKey) {
				t.Errorf("export warned about the daemon's own marker on the synthetic result:\n%s", r.stderr)
			}
		})
	}

	resp, err := d.client.GetSession(t.Context(), &sessiondv1.GetSessionRequest{
		Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "open"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := resp.GetSession()
	if s.GetMessageCount() != 5 || s.GetRevision() != created.GetRevision() || !cmp.Equal(s.GetOpenToolCallIds(), []string{"call_oslo"}) {
		t.Errorf("stored session changed by export: %d messages (want 5), revision %d (want %d), open tool calls %v (want [call_oslo])",
			s.GetMessageCount(), s.GetRevision(), created.GetRevision(), s.GetOpenToolCallIds())
	}
}

// exportedToolCalls reads an exported conversation in format f: the ids of
// its tool calls in order, and the text of each call's results. In
// anthropic a tool_result must be in the user message right after the
// assistant message that made the call; one elsewhere is an error.
func exportedToolCalls(t *testing.T, f string, doc any) ([]string, map[string][]string) {
	t.Helper()
	textOf := func(v any) string {
		if s, ok := v.(string); ok {
			return s
		}
		var b strings.Builder
		parts, _ := v.([]any)
		for _, p := range parts {
			if m, ok := p.(map[string]any); ok {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	}
	field := func(v any, k string) any { m, _ := v.(map[string]any); return m[k] }
	str := func(v any, k string) string { s, _ := field(v, k).(string); return s }
	list := func(v any, k string) []any { l, _ := field(v, k).([]any); return l }
	var calls []string
	results := map[string][]string{}
	switch f {
	case "openai-chat":
		for _, m := range list(doc, "messages") {
			for _, tc := range list(m, "tool_calls") {
				calls = append(calls, str(tc, "id"))
			}
			if str(m, "role") == "tool" {
				results[str(m, "tool_call_id")] = append(results[str(m, "tool_call_id")], textOf(field(m, "content")))
			}
		}
	case "openai-responses":
		for _, item := range list(doc, "input") {
			switch str(item, "type") {
			case "function_call":
				calls = append(calls, str(item, "call_id"))
			case "function_call_output":
				results[str(item, "call_id")] = append(results[str(item, "call_id")], textOf(field(item, "output")))
			}
		}
	case "anthropic":
		var previous []string // the calls of the message before
		for i, m := range list(doc, "messages") {
			var made []string
			for _, block := range list(m, "content") {
				switch str(block, "type") {
				case "tool_use":
					made = append(made, str(block, "id"))
				case "tool_result":
					id := str(block, "tool_use_id")
					if str(m, "role") != "user" || !slices.Contains(previous, id) {
						t.Errorf("messages[%d]: tool_result for %s is not in the user message right after its tool_use", i, id)
					}
					results[id] = append(results[id], textOf(field(block, "content")))
				}
			}
			calls = append(calls, made...)
			previous = made
		}
	}
	return calls, results
}

// TestExportFormatWarns: a session with what the API formats cannot hold
// exports with one warning per dropped field, on stderr, as lines or as
// JSON objects.
func TestExportFormatWarns(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	msgs := richMessages()
	msgs[2].Model = "gpt-4.1"
	msgs[2].Usage = &sessiondv1.Usage{InputTokens: 10, OutputTokens: 5}
	d.create(&sessiondv1.CreateSessionRequest{Alias: "rich", Title: "Rich", Labels: map[string]string{"team": "x"}, Messages: msgs})

	r := must(t, d.ctl("export", "--format", "openai-chat", "rich"))
	for _, field := range []string{"session.title", "session.labels", "message.usage", "message.model", "message.reasoning.signature",
		"message.metadata[tokens]", "message (fields unknown to this version)"} {
		if !strings.Contains(r.stderr, "sessionctl: export: warning: "+field+":") {
			t.Errorf("no warning for %s:\n%s", field, r.stderr)
		}
	}
	var body struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || body.Model != "gpt-4.1" || len(body.Messages) != 4 {
		t.Errorf("export body (model from the newest message that names one): %v\n%s", err, r.stdout)
	}

	r = must(t, d.ctl("--json", "export", "--format", "anthropic", "--model", "claude-x", "rich"))
	withMax := must(t, d.ctl("export", "--format", "anthropic", "--max-tokens", "2048", "rich"))
	if !strings.Contains(withMax.stdout, `"max_tokens": 2048`) || strings.Contains(withMax.stderr, "max_tokens") {
		t.Errorf("--max-tokens: %v", withMax)
	}
	var fields []string
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var w struct {
			Warning, Format, Field string
			First                  int
		}
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("--json warning is not a JSON object: %q", line)
		}
		fields = append(fields, w.Field)
	}
	for _, want := range []string{"max_tokens", "message.usage", "message.name"} {
		if !strings.Contains(strings.Join(fields, " "), want) {
			t.Errorf("--json warnings lack %s: %v", want, fields)
		}
	}
	if !strings.Contains(r.stdout, `"model": "claude-x"`) {
		t.Errorf("--model not used:\n%s", r.stdout)
	}
}

// TestImportFormatErrors: a bad file is a one-line error and leaves no
// session; unknown fields are named.
func TestImportFormatErrors(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	r := ctlIn(t, strings.NewReader(`{"model":"m","messages":[{"role":"robot","content":"x"}]}`), "--addr", d.addr, "import", "--format", "openai-chat", "-")
	if r.code != exitError || !strings.Contains(r.stderr, "messages[0].role") {
		t.Errorf("bad role: %v", r)
	}
	checkOneLineError(t, r)
	r = must(t, ctlIn(t, strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x","mood":"good"}]}`), "--addr", d.addr, "import", "--format", "openai-chat", "-"))
	if !strings.Contains(r.stderr, "warning: messages[0].mood: not understood; dropped") {
		t.Errorf("unknown field not named: %v", r)
	}
	ls := must(t, d.ctl("--json", "ls"))
	if n := strings.Count(ls.stdout, "\n"); n != 1 {
		t.Errorf("want only the good import, got %d sessions", n)
	}
	for _, args := range [][]string{
		{"import", "--format", "xml", "f"},
		{"import", "--alias", "a", "f"},
		{"import", "--format", "anthropic", "--alias", "not an alias", "f"},
		{"import", "--format", "anthropic", "--force", "f"},
		{"export", "--format", "anthropic", "--all"},
		{"export", "--model", "m", "a"},
		{"export", "--max-tokens", "5", "a"},
		{"export", "--format", "anthropic", "--max-tokens", "-1", "a"},
	} {
		r := d.ctl(args...)
		if r.code != exitUsage {
			t.Errorf("%v: want exit %d, got %v", args, exitUsage, r)
		}
		checkOneLineError(t, r)
	}
}

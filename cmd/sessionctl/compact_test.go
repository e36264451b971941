package main

import (
	"encoding/json"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestShowContextView: show --view context prints the latest compaction's
// summary in place of the range it covers, and export --view context
// writes a model request holding that view; both views of show count from
// the view they show.
func TestShowContextView(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "long", Messages: []*sessiondv1.Message{
		text(user, "u1", "first question"), text(assistant, "a1", "first answer"),
		text(user, "u2", "second question"), text(assistant, "a2", "second answer"),
	}})
	_, err := d.client.CompactSession(t.Context(), &sessiondv1.CompactSessionRequest{
		Ref:              &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}},
		ThroughMessageId: "a1",
		Summary:          text(system, "sum", "the user asked a first question, answered"),
	})
	if err != nil {
		t.Fatal(err)
	}
	full := must(t, d.ctl("show", "long")).stdout
	for _, want := range []string{"compacted:", "the first 2 messages (through a1)", "first question", "second answer"} {
		if !strings.Contains(full, want) {
			t.Errorf("show lacks %q:\n%s", want, full)
		}
	}
	ctx := must(t, d.ctl("show", "long", "--view", "context")).stdout
	for _, want := range []string{"context view", "the user asked a first question, answered", "second question", "second answer"} {
		if !strings.Contains(ctx, want) {
			t.Errorf("show --view context lacks %q:\n%s", want, ctx)
		}
	}
	if strings.Contains(ctx, "first answer") {
		t.Errorf("show --view context shows a compacted message:\n%s", ctx)
	}
	tail := must(t, d.ctl("show", "long", "--view", "context", "--tail", "1")).stdout
	if !strings.Contains(tail, "(2 earlier messages not shown)") {
		t.Errorf("show --view context --tail 1 does not count within the view:\n%s", tail)
	}

	out := must(t, d.ctl("export", "long", "--format", "openai-chat", "--view", "context")).stdout
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &req); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if len(req.Messages) != 3 || req.Messages[0].Role != "system" || req.Messages[1].Content != "second question" {
		t.Errorf("export --view context = %+v, want the summary, then u2 and a2", req.Messages)
	}
}

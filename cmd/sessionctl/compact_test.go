package main

import (
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

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

// TestExportImportKeepsCompaction: an export carries a compacted session's
// latest compaction with its summary, and an import stores it again, so
// the imported session's context view is the exported one's, at the same
// revision.
func TestExportImportKeepsCompaction(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "long", Messages: []*sessiondv1.Message{
		text(user, "u1", "first question"), text(assistant, "a1", "first answer"),
		text(user, "u2", "second question"), text(assistant, "a2", "second answer"),
	}})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}
	if _, err := d.client.CompactSession(t.Context(), &sessiondv1.CompactSessionRequest{
		Ref: ref, ThroughMessageId: "a1", Summary: text(system, "sum", "the user asked a first question, answered"),
	}); err != nil {
		t.Fatal(err)
	}
	before, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	beforeCtx := contextView(t, d, ref)

	file := filepath.Join(t.TempDir(), "long.jsonl")
	must(t, d.ctl("export", "long", "--output", file))
	must(t, d.ctl("rm", "--yes", "long"))
	must(t, d.ctl("import", file))

	after, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	ignoreStoredAt := protocmp.IgnoreFields(&sessiondv1.Compaction{}, "created_at")
	if diff := cmp.Diff(before, after, protocmp.Transform(), ignoreServerFields, ignoreStoredAt); diff != "" {
		t.Errorf("session after export, rm, import (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforeCtx, contextView(t, d, ref), protocmp.Transform()); diff != "" {
		t.Errorf("context view after export, rm, import (-before +after):\n%s", diff)
	}
}

// contextView returns the messages of the session's context view.
func contextView(t *testing.T, d *daemon, ref *sessiondv1.SessionRef) []*sessiondv1.Message {
	t.Helper()
	stream, err := d.client.LoadSession(t.Context(), &sessiondv1.LoadSessionRequest{Ref: ref, View: sessiondv1.LoadView_LOAD_VIEW_CONTEXT})
	if err != nil {
		t.Fatal(err)
	}
	var ms []*sessiondv1.Message
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return ms
		}
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, resp.GetMessages()...)
	}
}

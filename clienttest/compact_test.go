package clienttest_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestCompact: the handle compacts at the revision it holds (saving what is
// pending first), keeps every message, and loads the context view; the
// client loads either view and refuses a stale compaction.
func TestCompact(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	_ = h.Append(userMsg("u1"), assistantMsg("a1"), userMsg("u2"), assistantMsg("a2"))
	msgs := h.Messages()
	summary := &sessiondv1.Message{Id: "sum", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "u1 and a1, summarised"}
	if err := h.Compact(ctx, msgs[1].GetId(), summary); err != nil {
		t.Fatal(err)
	}
	got, err := h.ContextMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"u1 and a1, summarised", "u2", "a2"}; !slices.Equal(contents(got), want) {
		t.Errorf("ContextMessages = %q, want %q", contents(got), want)
	}
	if want := []string{"u1", "a1", "u2", "a2"}; !slices.Equal(contents(h.Messages()), want) {
		t.Errorf("handle messages after Compact = %q, want them whole: %q", contents(h.Messages()), want)
	}
	// The handle's revision followed the compaction: appending works.
	_ = h.Append(userMsg("u3"))
	if err := h.Save(ctx); err != nil {
		t.Fatalf("Save after Compact: %v", err)
	}

	sess, tail, err := c.Load(ctx, client.ID(h.ID()), client.LoadOptions{View: client.ViewContext, Tail: true, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a2", "u3"}; !slices.Equal(contents(tail), want) {
		t.Errorf("context view tail 2 = %q, want %q", contents(tail), want)
	}
	if sess.ContextMessageCount != 4 || sess.Compaction.GetThroughMessageCount() != 2 || sess.Compaction.GetSummaryMessageId() != "sum" {
		t.Errorf("session after Compact: context count %d, compaction %v", sess.ContextMessageCount, sess.Compaction)
	}
	_, err = c.Compact(ctx, client.ID(h.ID()), msgs[2].GetId(), summary, sess.Revision-1)
	if !errors.Is(err, client.ErrConflict) {
		t.Errorf("stale Compact = %v, want ErrConflict", err)
	}
}

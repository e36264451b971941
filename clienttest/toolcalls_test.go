package clienttest_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func roles(msgs []*sessiondv1.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.GetRole().String() + ":" + m.GetToolCallId()
	}
	return out
}

// TestResumeClosesOpenToolCalls: a program that stopped between a tool
// call and its result resumes with a history a model API accepts (a
// synthetic result for the open call), which is never saved back; the
// program may still answer the call, which replaces the synthetic result.
func TestResumeClosesOpenToolCalls(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "gpt-4.1",
		Usage:     &sessiondv1.Usage{InputTokens: 50, OutputTokens: 7},
		ToolCalls: []*sessiondv1.ToolCall{{Id: "call_a", Name: "f"}, {Id: "call_b", Name: "g"}}}
	if err := h.Append(userMsg("do two things"), call,
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_a", Content: "done"}); err != nil {
		t.Fatal(err)
	}
	if got := h.OpenToolCalls(); !slices.Equal(got, []string{"call_b"}) {
		t.Errorf("OpenToolCalls before the save = %v", got)
	}
	// A result for no open call, or a second one, is refused at once.
	for _, bad := range []string{"call_a", "call_zzz"} {
		if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: bad}); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("Append of a result for %s = %v, want ErrInvalid", bad, err)
		}
	}
	// The program stops here (the handle is closed, call_b never answered).
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := c.Open(ctx, client.ID(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	want := []string{"ROLE_USER:", "ROLE_ASSISTANT:", "ROLE_TOOL:call_a", "ROLE_TOOL:call_b"}
	msgs := r.Messages()
	if got := roles(msgs); !slices.Equal(got, want) {
		t.Fatalf("resumed history %v, want %v", got, want)
	}
	if msgs[3].GetMetadata()["sessiond.synthetic"] != "true" {
		t.Errorf("the result of call_b is not marked synthetic: %v", msgs[3])
	}
	if got := r.OpenToolCalls(); !slices.Equal(got, []string{"call_b"}) {
		t.Errorf("OpenToolCalls after resume = %v, want [call_b]", got)
	}
	if r.Dirty() || r.Unsaved() != 0 {
		t.Errorf("the synthetic result made the handle dirty: Dirty %v, Unsaved %d", r.Dirty(), r.Unsaved())
	}
	// It is never saved: a save and a new message leave the daemon with
	// the stored messages plus the new one.
	if err := r.Append(userMsg("go on")); err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx); err != nil {
		t.Fatal(err)
	}
	sess, stored, err := c.Load(ctx, client.ID(h.ID()), client.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(stored); !slices.Equal(got, []string{"ROLE_USER:", "ROLE_ASSISTANT:", "ROLE_TOOL:call_a", "ROLE_USER:"}) {
		t.Errorf("stored after resume and save: %v", got)
	}
	if !slices.Equal(sess.OpenToolCallIDs, []string{"call_b"}) || sess.Usage.GetInputTokens() != 50 || !slices.Equal(sess.Models, []string{"gpt-4.1"}) {
		t.Errorf("session tally: open %v, usage %v, models %v", sess.OpenToolCallIDs, sess.Usage, sess.Models)
	}
	// Rewind counts stored messages only: keeping 3 keeps the synthetic
	// result that follows them.
	if err := r.Rewind(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Messages()); !slices.Equal(got, want) {
		t.Errorf("after Rewind(3): %v, want %v", got, want)
	}
	// Answering the call late replaces the synthetic result.
	if err := r.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_b", Content: "late"}); err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Messages()); !slices.Equal(got, []string{"ROLE_USER:", "ROLE_ASSISTANT:", "ROLE_TOOL:call_a", "ROLE_TOOL:call_b"}) {
		t.Errorf("after the late answer: %v", got)
	}
	if last := r.Messages()[3]; last.GetContent() != "late" || len(r.OpenToolCalls()) != 0 {
		t.Errorf("late answer: %v, open %v", last, r.OpenToolCalls())
	}
	if err := r.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Messages()); !slices.Equal(got, want) || r.Messages()[3].GetContent() != "late" {
		t.Errorf("after save and reload: %v", got)
	}
	// A made-up result is never stored, whoever tries.
	syn := msgs[3]
	if _, err := c.Create(ctx, client.CreateOptions{Messages: []*sessiondv1.Message{msgs[1], syn}}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("create with a synthetic result = %v, want ErrInvalid", err)
	}
}

func TestExpireAfterAndModelFilter(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	s, err := c.Create(ctx, client.CreateOptions{ExpireAfter: 48 * time.Hour, Messages: []*sessiondv1.Message{
		{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-x", Content: "hi"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpireAfter != 48*time.Hour {
		t.Errorf("ExpireAfter = %v", s.ExpireAfter)
	}
	up, err := c.Update(ctx, s.Ref(), client.SetExpireAfter(0))
	if err != nil || up.ExpireAfter != 0 {
		t.Fatalf("SetExpireAfter(0): %v, %v", up, err)
	}
	var got []string
	for se, err := range c.List(ctx, client.ListOptions{Model: "m-x"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, se.ID)
	}
	if !slices.Equal(got, []string{s.ID}) {
		t.Errorf("List(model m-x) = %v, want [%s]", got, s.ID)
	}
}

// TestLateAnswersToAdjacentSyntheticResults: answering two calls a resume
// closed with adjacent synthetic results drops both, and a save stores
// both answers.
func TestLateAnswersToAdjacentSyntheticResults(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT,
		ToolCalls: []*sessiondv1.ToolCall{{Id: "call_a", Name: "f"}, {Id: "call_b", Name: "g"}}}
	if err := h.Append(userMsg("do two things"), call); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Open(ctx, client.ID(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	want := []string{"ROLE_USER:", "ROLE_ASSISTANT:", "ROLE_TOOL:call_a", "ROLE_TOOL:call_b"}
	if got := roles(r.Messages()); !slices.Equal(got, want) {
		t.Fatalf("resumed history %v, want %v", got, want)
	}
	if err := r.Append(
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_a", Content: "a"},
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_b", Content: "b"}); err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Messages()); !slices.Equal(got, want) {
		t.Errorf("after the late answers: %v, want %v", got, want)
	}
	if r.Unsaved() != 2 {
		t.Errorf("Unsaved after two late answers = %d, want 2", r.Unsaved())
	}
	if err := r.Save(ctx); err != nil {
		t.Fatal(err)
	}
	_, stored, err := c.Load(ctx, client.ID(h.ID()), client.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(stored); !slices.Equal(got, want) {
		t.Errorf("stored after the late answers: %v, want %v", got, want)
	}
}

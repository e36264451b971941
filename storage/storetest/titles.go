package storetest

import (
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func wantTitle(t *testing.T, what string, got *storage.Session, title string, derived bool) {
	t.Helper()
	if got.Title != title || got.TitleDerived != derived {
		t.Errorf("%s: title %q (derived %v), want %q (derived %v)", what, got.Title, got.TitleDerived, title, derived)
	}
}

// testTitles checks the derived-title rule: a session with no title takes
// the first line of its first user message with text, marked derived, on
// every write that adds messages and across a reopen; a title a client
// gives replaces it.
func testTitles(t *testing.T, h *harness) {
	ctx := t.Context()
	s, addr := h.openData(t)
	system := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_SYSTEM, Content: "You are terse."}
	question := msg("", "  How do I\tcut a  release?\nSecond line")

	created := create(t, s, storage.CreateRequest{Alias: "titled-by-create", Messages: []*sessiondv1.Message{system, question}})
	wantTitle(t, "create with a user message", created, "How do I cut a release?", true)

	explicit := create(t, s, storage.CreateRequest{Title: "Mine", Messages: []*sessiondv1.Message{question}})
	wantTitle(t, "create with a title", explicit, "Mine", false)
	appendMsgs(t, s, storage.Ref{ID: explicit.ID}, msg("", "another question"))
	wantTitle(t, "append to a titled session", get(t, s, storage.Ref{ID: explicit.ID}), "Mine", false)

	empty := create(t, s, storage.CreateRequest{Messages: []*sessiondv1.Message{system}})
	wantTitle(t, "create with no user message", empty, "", false)
	ref := storage.Ref{ID: empty.ID}
	appendMsgs(t, s, ref, &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER,
		Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: "\n\nFrom a text part"}}}})
	wantTitle(t, "append of the first user message", get(t, s, ref), "From a text part", true)
	appendMsgs(t, s, ref, msg("", "a later question"))
	wantTitle(t, "append of a later user message", get(t, s, ref), "From a text part", true)

	long := strings.Repeat("word ", 40)
	longSession := create(t, s, storage.CreateRequest{Messages: []*sessiondv1.Message{msg("", long)}})
	if n := len([]rune(longSession.Title)); n > storage.DerivedTitleRunes || !strings.HasSuffix(longSession.Title, "word…") {
		t.Errorf("title of a long first line = %q (%d runes), want whole words and \"…\" within %d runes", longSession.Title, n, storage.DerivedTitleRunes)
	}

	fork, err := s.Fork(ctx, storage.ForkRequest{Ref: ref})
	must(t, "Fork", err)
	wantTitle(t, "fork of a session with a derived title", fork, "From a text part", true)

	updated, err := s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: created.ID}, Fields: storage.UpdateTitle, Title: "Release notes"})
	must(t, "Update title", err)
	wantTitle(t, "explicit title over a derived one", updated, "Release notes", false)
	cleared, err := s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: created.ID}, Fields: storage.UpdateTitle, Title: ""})
	must(t, "Update clearing the title", err)
	wantTitle(t, "cleared title", cleared, "", false)
	if cleared.Revision != updated.Revision+1 {
		t.Errorf("clearing a title: revision %d, want %d", cleared.Revision, updated.Revision+1)
	}
	appendMsgs(t, s, storage.Ref{ID: created.ID}, msg("", "Next question"))
	wantTitle(t, "user message after the title was cleared", get(t, s, storage.Ref{ID: created.ID}), "Next question", true)

	saved, err := s.Save(ctx, storage.SaveRequest{Ref: storage.Ref{ID: explicit.ID}, Messages: []*sessiondv1.Message{msg("sq", "Saved question")}})
	must(t, "Save", err)
	wantTitle(t, "save without a title", saved, "Saved question", true)
	again, err := s.Save(ctx, storage.SaveRequest{Ref: storage.Ref{ID: explicit.ID}, Messages: []*sessiondv1.Message{msg("sq", "Saved question")}})
	must(t, "Save again", err)
	if again.Revision != saved.Revision {
		t.Errorf("the same save again: revision %d, want %d (a no-op)", again.Revision, saved.Revision)
	}

	// A retried create with the same id and messages is the same create.
	id := "0190e3f1-5a5b-7c3d-8e9f-0a1b2c3d4e5f"
	first := create(t, s, storage.CreateRequest{ID: id, Messages: []*sessiondv1.Message{msg("q1", "Same question")}})
	retry := create(t, s, storage.CreateRequest{ID: id, Messages: []*sessiondv1.Message{msg("q1", "Same question")}})
	if retry.Revision != first.Revision || retry.Title != "Same question" {
		t.Errorf("retried create = revision %d title %q, want the first create's (revision %d)", retry.Revision, retry.Title, first.Revision)
	}

	listed := map[string]*storage.Session{}
	for _, m := range listAll(t, s, storage.ListOptions{}) {
		listed[m.ID] = m
	}
	wantTitle(t, "listed session", listed[ref.ID], "From a text part", true)

	s2 := h.reopen(t, "titles after reopen", s, addr)
	wantTitle(t, "after reopen", get(t, s2, ref), "From a text part", true)
	must(t, "Close", s2.Close())
}

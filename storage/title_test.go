package storage

import (
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestCanTitle: the cheap check the PostgreSQL append runs agrees with
// TitleFrom on every kind of text.
func TestCanTitle(t *testing.T) {
	user := func(content string, parts ...string) *sessiondv1.Message {
		m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: content}
		for _, p := range parts {
			m.Parts = append(m.Parts, &sessiondv1.ContentPart{Kind: &sessiondv1.ContentPart_Text{Text: p}})
		}
		return m
	}
	for _, msgs := range [][]*sessiondv1.Message{
		nil,
		{{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "an answer"}},
		{user("")},
		{user(" \t\n\u0085 ")},
		{user("", "", "  from a part ")},
		{user("", "\n\n")},
		{user(" \n "), user("second")},
		{user("\x01\x02"), {Role: sessiondv1.Role_ROLE_SYSTEM, Content: "system"}},
		{user("question")},
	} {
		if got, want := CanTitle(msgs), TitleFrom(msgs) != ""; got != want {
			t.Errorf("CanTitle(%v) = %v, but TitleFrom is %q", msgs, got, TitleFrom(msgs))
		}
	}
}

package storage

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// DerivedTitleRunes bounds a derived title; a longer first line is cut at
// the last word boundary before it and ends with "…".
const DerivedTitleRunes = 80

// DeriveTitle is the title-derivation rule, applied by every write that
// adds messages to a session (create, save, append; a backend replaying
// its log applies it the same way): a session with no title takes the first
// line of the first user message among msgs that has text, and is marked
// TitleDerived. A session that has a title keeps it. It reports whether it
// changed m.
func DeriveTitle(m *Session, msgs []*sessiondv1.Message) bool {
	if m.Title != "" {
		return false
	}
	m.Title, m.TitleDerived = titleOf("", msgs)
	return m.TitleDerived
}

// CanTitle reports, without building the title, whether msgs would title
// an untitled session (TitleFrom is not ""): a check cheap enough for every
// append.
func CanTitle(msgs []*sessiondv1.Message) bool {
	return slices.ContainsFunc(msgs, func(m *sessiondv1.Message) bool {
		return m.GetRole() == sessiondv1.Role_ROLE_USER && strings.ContainsFunc(messageText(m), notBlank)
	})
}

func blank(r rune) bool    { return unicode.IsSpace(r) || unicode.IsControl(r) }
func notBlank(r rune) bool { return !blank(r) }

// TitleFrom returns the title DeriveTitle would take from msgs: the first
// non-blank line of the first user message with text (its content, or else
// its first text part), with runs of spaces and control characters made
// one space, cut at a word boundary to at most DerivedTitleRunes runes; ""
// when no user message has text.
func TitleFrom(msgs []*sessiondv1.Message) string {
	for _, m := range msgs {
		if m.GetRole() != sessiondv1.Role_ROLE_USER {
			continue
		}
		if t := titleLine(messageText(m)); t != "" {
			return t
		}
	}
	return ""
}

func messageText(m *sessiondv1.Message) string {
	if m.GetContent() != "" {
		return m.GetContent()
	}
	for _, p := range m.GetParts() {
		if t := p.GetText(); t != "" {
			return t
		}
	}
	return ""
}

func titleLine(s string) string {
	for line := range strings.Lines(s) {
		if t := strings.Join(strings.FieldsFunc(line, blank), " "); t != "" {
			return cutWords(t, DerivedTitleRunes)
		}
	}
	return ""
}

// cutWords shortens s to at most n runes, at the last space that keeps
// the "…" within n (or mid-word when the first word alone is longer).
func cutWords(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)[:n-1]
	cut := string(runes)
	if i := strings.LastIndexByte(cut, ' '); i > 0 {
		cut = cut[:i]
	}
	return cut + "…"
}

// titleOf is the title and mark of a session created or saved with title
// and msgs.
func titleOf(title string, msgs []*sessiondv1.Message) (string, bool) {
	if title != "" {
		return title, false
	}
	t := TitleFrom(msgs)
	return t, t != ""
}

// GivenTitle is the title a client gave the session: Title, or "" when it
// was derived. Search matches this one: a derived title's text is its
// message's, which search finds as a message hit.
func (s *Session) GivenTitle() string {
	if s.TitleDerived {
		return ""
	}
	return s.Title
}

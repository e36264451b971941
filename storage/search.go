package storage

import (
	"strings"
	"unicode/utf8"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// MessageTexts returns the strings of m that Search looks in, in order: its
// content, its parts' text and its tool calls' arguments.
func MessageTexts(m *sessiondv1.Message) []string {
	texts := []string{m.GetContent()}
	for _, p := range m.GetParts() {
		if t := p.GetText(); t != "" {
			texts = append(texts, t)
		}
	}
	for _, tc := range m.GetToolCalls() {
		texts = append(texts, tc.GetArguments())
	}
	return texts
}

// Snippet finds the lowered query q in text case-insensitively and returns
// up to about 60 bytes either side of it, cut at rune boundaries: the
// SearchHit snippet every backend returns.
func Snippet(text, q string) (string, bool) {
	low := strings.ToLower(text)
	i := strings.Index(low, q)
	if i < 0 {
		return "", false
	}
	if len(low) != len(text) {
		text = low // lowering changed byte lengths: offsets only fit the lowered text
	}
	const ctx = 60
	from, to := max(0, i-ctx), min(len(text), i+len(q)+ctx)
	for from > 0 && !utf8.RuneStart(text[from]) {
		from--
	}
	for to < len(text) && !utf8.RuneStart(text[to]) {
		to++
	}
	return text[from:to], true
}

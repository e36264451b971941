package postgres_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
)

// TestSignatureHoldsEverySubstring: the signature of a text has every bit
// of the signature of each of its substrings, whatever the bytes (search
// would otherwise miss that text), and a text far from full is told apart
// from most queries it does not hold (the signature narrows at all).
func TestSignatureHoldsEverySubstring(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabets := []string{"abcdefghijklmnopqrstuvwxyz0123456789 ", "aé€😀\n\uFFFD"}
	for _, alpha := range alphabets {
		runes := []rune(alpha)
		for range 200 {
			var b strings.Builder
			for range 1 + rng.IntN(2000) {
				b.WriteRune(runes[rng.IntN(len(runes))])
			}
			text := postgres.SearchText(b.String())
			sig, _ := postgres.Signature(text)
			for range 20 {
				i := rng.IntN(len(text))
				j := i + rng.IntN(len(text)-i+1)
				q, narrows := postgres.Signature(text[i:j])
				if narrows != (j-i >= 3) {
					t.Fatalf("a %d-byte query narrows: %v", j-i, narrows)
				}
				for k := range q.Bytes {
					if q.Bytes[k]&^sig.Bytes[k] != 0 {
						t.Fatalf("the signature of %q lacks bits of its substring %q", text, text[i:j])
					}
				}
			}
		}
	}
	sig, _ := postgres.Signature(postgres.SearchText("Sunny weather in Paris today, a light breeze from the west"))
	misses := 0
	for _, q := range []string{"berlin", "rainy", "snow storm", "quantum", "zebra", "kettle"} {
		qs, _ := postgres.Signature(q)
		for k := range qs.Bytes {
			if qs.Bytes[k]&^sig.Bytes[k] != 0 {
				misses++
				break
			}
		}
	}
	if misses < 5 {
		t.Errorf("the signature of a short text matches %d of 6 queries it does not hold", 6-misses)
	}
}

// TestMessageSignatureIsThatOfItsSearchText: a message's signature, hashed
// while its texts are lowered, is the signature of their search text,
// whatever the bytes (upper case, runes that change length when lowered,
// NUL, invalid UTF-8), or search would miss the message.
func TestMessageSignatureIsThatOfItsSearchText(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "Z", "Q", " ", "\n", "\x00", "é", "É", "İ", "ẞ", "Σ", "€", "😀", "\xff", "\xe2\x82", "\uFFFD"}
	text := func() string {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for range 2000 {
		m := &sessiondv1.Message{Content: text(), Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: text()}}},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c", Name: "f", Arguments: text()}}}
		want, _ := postgres.Signature(postgres.SearchText(storage.MessageTexts(m)...))
		if got := postgres.MessageSignature(m); !bytes.Equal(got.Bytes, want.Bytes) {
			t.Fatalf("message %v: its signature is not that of its search text", m)
		}
	}
}

func BenchmarkMessageSignature(b *testing.B) {
	m := &sessiondv1.Message{Content: strings.Repeat("The quick brown Fox jumps over the lazy dog. ", 23)}
	b.SetBytes(int64(len(m.Content)))
	for b.Loop() {
		postgres.MessageSignature(m)
	}
}

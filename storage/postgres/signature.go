package postgres

import (
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Message search narrows its candidates with a signature of each message's
// search text (searchText of its texts): a bit set of sigBits bits in
// which every three-byte window of the text sets the bit its hash names.
// A text holding the query holds every window of it, so its signature has
// every bit the query's has; search reads a message only when it does,
// and then decides on the decoded message. A query shorter than three
// bytes has no window and reads every message. A long text sets most bits
// and is read for most queries, never missed.
//
// The signatures are message_search's sig column (bit(2048)), which the
// indexer writes and search tests with (sig & q) = q while it walks a
// session's rows: 256 bytes a message, where the lowered text and a GiST
// entry over its trigrams took about four times that, in the table and in
// the WAL of every message indexed.
const sigBits = 2048

// signature returns the signature of text; ok is false when text has no
// window (shorter than three bytes).
func signature(text string) (sig pgtype.Bits, ok bool) {
	h := newSigHasher()
	for i := 0; i < len(text); i++ {
		h.add(text[i])
	}
	return h.sig, len(text) >= 3
}

// sigHasher sets a signature's bits from a text fed to it byte by byte.
type sigHasher struct {
	sig pgtype.Bits
	w   uint32 // the last three bytes
	n   int
}

func newSigHasher() sigHasher {
	return sigHasher{sig: pgtype.Bits{Bytes: make([]byte, sigBits/8), Len: sigBits, Valid: true}}
}

func (h *sigHasher) add(b byte) {
	h.w = (h.w<<8 | uint32(b)) & 0xFFFFFF
	if h.n++; h.n >= 3 {
		x := (h.w * 2654435761) >> (32 - 11) // Fibonacci hashing onto 11 bits: sigBits
		h.sig.Bytes[x>>3] |= 0x80 >> (x & 7) // bit strings count from the first byte's high bit
	}
}

// addLowered feeds text as searchText lowers it, without building the
// lowered copy: this runs for every message appended.
func (h *sigHasher) addLowered(text string) {
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			switch {
			case c == 0:
				h.addBytes(replacementNUL)
			case 'A' <= c && c <= 'Z':
				h.add(c + 'a' - 'A')
			default:
				h.add(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:]) // invalid bytes: U+FFFD, as strings.ToLower writes
		h.addBytes(utf8.AppendRune(buf[:0], unicode.ToLower(r)))
		i += size
	}
}

func (h *sigHasher) addBytes(b []byte) {
	for _, c := range b {
		h.add(c)
	}
}

var replacementNUL = []byte("\uFFFD")

// messageSignature is the signature message_search holds for m: that of
// its texts' search text.
func messageSignature(m *sessiondv1.Message) pgtype.Bits {
	h := newSigHasher()
	for i, t := range storage.MessageTexts(m) {
		if i > 0 {
			h.add('\n')
		}
		h.addLowered(t)
	}
	return h.sig
}

// signatures returns the signatures of msgs, in order.
func signatures(msgs []*sessiondv1.Message) []pgtype.Bits {
	sigs := make([]pgtype.Bits, len(msgs))
	for i, m := range msgs {
		sigs[i] = messageSignature(m)
	}
	return sigs
}

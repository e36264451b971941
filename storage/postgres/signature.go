package postgres

import (
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
	sig = pgtype.Bits{Bytes: make([]byte, sigBits/8), Len: sigBits, Valid: true}
	for i := 0; i+3 <= len(text); i++ {
		w := uint32(text[i])<<16 | uint32(text[i+1])<<8 | uint32(text[i+2])
		h := (w * 2654435761) >> (32 - 11) // Fibonacci hashing onto 11 bits: sigBits
		sig.Bytes[h>>3] |= 0x80 >> (h & 7) // bit strings count from the first byte's high bit
	}
	return sig, len(text) >= 3
}

// messageSignature is the signature message_search holds for m: that of
// its texts' search text.
func messageSignature(m *sessiondv1.Message) pgtype.Bits {
	sig, _ := signature(searchText(storage.MessageTexts(m)...))
	return sig
}

// signatures returns the signatures of msgs, in order.
func signatures(msgs []*sessiondv1.Message) []pgtype.Bits {
	sigs := make([]pgtype.Bits, len(msgs))
	for i, m := range msgs {
		sigs[i] = messageSignature(m)
	}
	return sigs
}

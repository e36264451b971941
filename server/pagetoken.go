package server

import (
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/storage"
)

// Page tokens are opaque to clients: URL-safe base64 (no padding) of
//
//	version byte (1) | varint unix seconds | uvarint nanoseconds | 16-byte session UUID
//
// i.e. a storage.Cursor. The version byte leaves room to change the format;
// decoding is strict so that any token the server did not make is refused
// with INVALID_ARGUMENT rather than resuming somewhere arbitrary.
const pageTokenVersion = 1

func encodePageToken(c storage.Cursor) string {
	var b [64]byte
	return string(appendPageToken(b[:0], c))
}

// appendPageToken appends c's page token (encodePageToken's) to dst.
func appendPageToken(dst []byte, c storage.Cursor) []byte {
	u, err := uuid.Parse(c.ID)
	if err != nil {
		// Storage answers canonical UUIDs only; an id that is not one cannot
		// be resumed after, so the token is left empty rather than wrong.
		return dst
	}
	var raw [1 + binary.MaxVarintLen64*2 + 16]byte
	b := append(raw[:0], pageTokenVersion)
	b = binary.AppendVarint(b, c.UpdatedAt.Unix())
	b = binary.AppendUvarint(b, uint64(c.UpdatedAt.Nanosecond()))
	b = append(b, u[:]...)
	return base64.RawURLEncoding.AppendEncode(dst, b)
}

func decodePageToken(tok string) (storage.Cursor, error) {
	bad := func(why string) (storage.Cursor, error) {
		return storage.Cursor{}, storage.Invalid("page_token", "is not a token this server made (%s)", why)
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return bad("not base64")
	}
	if len(b) == 0 || b[0] != pageTokenVersion {
		return bad("unknown version")
	}
	b = b[1:]
	sec, n := binary.Varint(b)
	if n <= 0 {
		return bad("bad time")
	}
	b = b[n:]
	nsec, n := binary.Uvarint(b)
	if n <= 0 || nsec >= uint64(time.Second) {
		return bad("bad time")
	}
	b = b[n:]
	if len(b) != 16 {
		return bad("bad id")
	}
	u, err := uuid.FromBytes(b)
	if err != nil {
		return bad("bad id")
	}
	return storage.Cursor{UpdatedAt: time.Unix(sec, int64(nsec)).UTC(), ID: u.String()}, nil
}

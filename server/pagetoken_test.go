package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/storage"
)

func TestPageTokenRoundTrip(t *testing.T) {
	tests := []storage.Cursor{
		{UpdatedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC), ID: "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"},
		{UpdatedAt: time.Unix(0, 0).UTC(), ID: uuid.NewString()},
		{UpdatedAt: time.Date(1960, 1, 1, 0, 0, 0, 1, time.UTC), ID: uuid.NewString()},
		{UpdatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), ID: uuid.NewString()},
	}
	for _, c := range tests {
		tok := encodePageToken(c)
		if tok == "" || strings.ContainsAny(tok, "+/=") {
			t.Fatalf("token %q for %v is not URL-safe base64", tok, c)
		}
		got, err := decodePageToken(tok)
		if err != nil {
			t.Fatalf("decode(%q): %v", tok, err)
		}
		if !got.UpdatedAt.Equal(c.UpdatedAt) || got.ID != c.ID {
			t.Fatalf("round trip of %v gave %v", c, got)
		}
	}
}

func TestPageTokenRejects(t *testing.T) {
	good := encodePageToken(storage.Cursor{UpdatedAt: time.Now(), ID: uuid.NewString()})
	for _, tok := range []string{
		"!!!",
		"AA",                    // version 0
		good[:len(good)-4],      // truncated id
		good + "AAAA",           // trailing bytes
		"Af___________________", // varint overflow
	} {
		_, err := decodePageToken(tok)
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), "page_token") {
			t.Fatalf("decode(%q) = %v; want ErrInvalid naming page_token", tok, err)
		}
	}
}

func FuzzDecodePageToken(f *testing.F) {
	f.Add(encodePageToken(storage.Cursor{UpdatedAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), ID: uuid.NewString()}))
	f.Add("")
	f.Add("AQ")
	f.Add("not base64!")
	f.Add("Af___________________")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := decodePageToken(tok)
		if err != nil {
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("decode(%q) error %v does not wrap ErrInvalid", tok, err)
			}
			return
		}
		// Whatever decodes names a canonical id and re-encodes to a token
		// that decodes to the same cursor.
		if _, err := storage.ParseSessionID("id", c.ID); err != nil || c.ID != strings.ToLower(c.ID) {
			t.Fatalf("decode(%q) gave a non-canonical id %q", tok, c.ID)
		}
		again, err := decodePageToken(encodePageToken(c))
		if err != nil || !again.UpdatedAt.Equal(c.UpdatedAt) || again.ID != c.ID {
			t.Fatalf("re-encoding %v gave %v, %v", c, again, err)
		}
	})
}

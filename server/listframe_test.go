package server

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// randomListed makes a session with each field set or left zero at random,
// with edge values (negative counts and times, empty strings in lists and
// maps, multi-byte text, and now and then invalid UTF-8).
func randomListed(r *rand.Rand) *storage.Session {
	maybe := func() bool { return r.IntN(3) > 0 }
	text := func() string {
		switch r.IntN(8) {
		case 0:
			return ""
		case 1:
			return "é✓ 漢字"
		case 2:
			if r.IntN(20) == 0 {
				return "bad\xff"
			}
		}
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	i64 := func() int64 {
		switch r.IntN(5) {
		case 0:
			return 0
		case 1:
			return -r.Int64N(1 << 40)
		case 2:
			return math.MaxInt64
		}
		return r.Int64N(1 << uint(r.IntN(62)+1))
	}
	tm := func() time.Time {
		switch r.IntN(5) {
		case 0:
			return time.Time{}
		case 1:
			return time.Unix(-r.Int64N(1<<34), r.Int64N(1e9))
		case 2:
			return time.Unix(r.Int64N(1<<34), 0)
		}
		return time.Unix(r.Int64N(1<<34), r.Int64N(1e9))
	}
	strs := func() []string {
		if !maybe() {
			return nil
		}
		out := make([]string, r.IntN(4))
		for i := range out {
			out[i] = text()
		}
		return out
	}
	kv := func() map[string]string {
		if !maybe() {
			return nil
		}
		m := map[string]string{}
		for range r.IntN(4) {
			m[text()] = text()
		}
		return m
	}
	s := &storage.Session{Namespace: text(), Alias: text(), Title: text(), Summary: text(),
		CreatedAt: tm(), UpdatedAt: tm(), Metadata: kv(), Labels: kv()}
	if maybe() {
		s.ID = uuid.Must(uuid.NewV7()).String()
	} else if maybe() {
		s.ID = text() // not a UUID: no page token
	}
	if maybe() {
		s.Revision = uint64(i64())
	}
	s.MessageCount = i64()
	if r.IntN(3) == 0 {
		s.Parent = &storage.ForkOrigin{}
		if maybe() {
			s.Parent.SessionID = text()
		}
		if maybe() {
			s.Parent.MessageCount = i64()
		}
	}
	s.OpenToolCallIDs, s.Models = strs(), strs()
	if maybe() {
		s.Usage = storage.Usage{InputTokens: i64(), OutputTokens: i64(), CachedInputTokens: i64(), ReasoningTokens: i64()}
	}
	s.Unknown = r.IntN(6) == 0
	if maybe() {
		s.ExpireAfter = time.Duration(i64())
	}
	return s
}

// The hand-written frame decodes to exactly what listFrameToProto makes,
// has its size, and equals proto's deterministic encoding byte for byte
// where map order cannot differ; invalid UTF-8 fails as proto.Marshal does.
func TestListFrameMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	det := proto.MarshalOptions{Deterministic: true}
	failed := 0
	for i := range 5000 {
		s := randomListed(r)
		want := listFrameToProto(s)
		wantB, wantErr := det.Marshal(want)
		got, err := encodeListFrame(s)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("session %d: encodeListFrame error %v, proto.Marshal error %v\n%+v", i, err, wantErr, s)
		}
		if err != nil {
			failed++
			continue
		}
		var back sessiondv1.ListSessionsResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("session %d: the frame does not decode: %v", i, err)
		}
		if !proto.Equal(&back, want) {
			t.Fatalf("session %d: the frame decodes to\n%v\nwant\n%v", i, &back, want)
		}
		if len(got) != len(wantB) || len(s.Metadata) <= 1 && len(s.Labels) <= 1 && !bytes.Equal(got, wantB) {
			t.Fatalf("session %d: frame\n%x\nproto's\n%x", i, got, wantB)
		}
		if cap(got) != len(got) {
			t.Fatalf("session %d: frame of %d bytes holds %d", i, len(got), cap(got))
		}
	}
	if failed == 0 || failed > 2500 {
		t.Fatalf("%d of 5000 sessions held invalid UTF-8; the generator is off", failed)
	}
}

// encodeListFrame and randomListed know every field of storage.Session: a
// new one must be added to both (and this list), or the frame would drop
// it while the test above still passed.
func TestListFrameKnowsEveryField(t *testing.T) {
	var names []string
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, prefix string) {
		for f := range ty.Fields() {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type, prefix+f.Name+".")
				continue
			}
			names = append(names, prefix+f.Name)
		}
	}
	walk(reflect.TypeFor[storage.Session](), "")
	want := []string{"ID", "Namespace", "Alias", "Title", "Summary", "CreatedAt", "UpdatedAt", "Revision", "MessageCount",
		"Metadata", "Labels", "Parent", "Tally.OpenToolCallIDs", "Tally.Usage", "Tally.Models", "Tally.Unknown", "ExpireAfter"}
	if !slices.Equal(names, want) {
		t.Fatalf("storage.Session has fields %v; encodeListFrame and randomListed know %v", names, want)
	}
}

func BenchmarkListFrame(b *testing.B) {
	s := &storage.Session{ID: uuid.Must(uuid.NewV7()).String(), Namespace: "list", Title: "sessiond-load list",
		CreatedAt: time.Now(), UpdatedAt: time.Now(), Revision: 1}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeListFrame(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(listFrameToProto(s)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

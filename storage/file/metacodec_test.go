package file

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// protoMeta is the decoding decodeMeta replaces: proto.Unmarshal, then
// metaFromProto.
func protoMeta(b []byte) (*storage.Session, error) {
	var p sessiondv1.Session
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return metaFromProto(&p), nil
}

// metaFromProto is the conversion decodeMeta does along with decoding.
func metaFromProto(p *sessiondv1.Session) *storage.Session {
	m := &storage.Session{
		ID: p.GetId(), Namespace: p.GetNamespace(), Alias: p.GetAlias(), Title: p.GetTitle(), Summary: p.GetSummary(),
		CreatedAt: p.GetCreatedAt().AsTime(), UpdatedAt: p.GetUpdatedAt().AsTime(),
		Revision: p.GetRevision(), MessageCount: p.GetMessageCount(),
		Metadata: p.GetMetadata(), Labels: p.GetLabels(), TitleDerived: p.GetTitleDerived(),
	}
	if p.Parent != nil {
		m.Parent = &storage.ForkOrigin{SessionID: p.Parent.GetSessionId(), MessageCount: p.Parent.GetMessageCount()}
	}
	m.OpenToolCallIDs, m.Models = p.GetOpenToolCallIds(), p.GetModels()
	if u := p.GetUsage(); u != nil {
		m.Usage = storage.Usage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
			CachedInputTokens: u.GetCachedInputTokens(), ReasoningTokens: u.GetReasoningTokens()}
	}
	if d := p.GetExpireAfter(); d != nil {
		m.ExpireAfter = d.AsDuration()
	}
	if c := p.GetCompaction(); c != nil {
		m.Compaction = compactionFromProto(c)
	}
	return m
}

func randomMeta(r *rand.Rand) *storage.Session {
	str := func() string {
		const chars = "abcé-😀 "
		rs := []rune(chars)
		out := make([]rune, r.IntN(6))
		for i := range out {
			out[i] = rs[r.IntN(len(rs))]
		}
		return string(out)
	}
	m := &storage.Session{ID: str(), Namespace: str(), Alias: str(), Title: str(), Summary: str(),
		CreatedAt: time.Unix(r.Int64N(1<<40)-1<<39, r.Int64N(1e9)).UTC(), UpdatedAt: time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).UTC(),
		Revision: r.Uint64(), MessageCount: r.Int64N(3)}
	if r.IntN(2) == 0 {
		m.Metadata = map[string]string{str(): str(), str(): str()}
	}
	if r.IntN(2) == 0 {
		m.Labels = map[string]string{str(): str()}
	}
	if r.IntN(3) == 0 {
		m.Parent = &storage.ForkOrigin{SessionID: str(), MessageCount: r.Int64N(100)}
	}
	if r.IntN(4) != 0 {
		m.Usage = storage.Usage{InputTokens: r.Int64N(1e6), OutputTokens: r.Int64N(10), CachedInputTokens: r.Int64N(2), ReasoningTokens: -r.Int64N(2)}
		for range r.IntN(3) {
			m.OpenToolCallIDs = append(m.OpenToolCallIDs, str())
			m.Models = append(m.Models, str())
		}
	}
	if r.IntN(2) == 0 {
		m.ExpireAfter = time.Duration(r.Int64N(1 << 50))
	}
	if r.IntN(3) == 0 {
		m.Compaction = &storage.Compaction{ThroughCount: r.Int64N(100), ThroughID: str(), Revision: r.Uint64(),
			CreatedAt: time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).UTC(), SummaryID: str()}
	}
	return m
}

// decodeMeta must decode every input exactly as proto.Unmarshal and
// metaFromProto do, and fail on exactly the inputs they fail on: written
// metadata, metadata merged from two encodings (as proto concatenation
// does), with unknown fields and fields of unexpected wire types, and
// random damage to all of those.
func TestDecodeMetaMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	maps := newMapShare()
	check := func(what string, b []byte) {
		t.Helper()
		want, werr := protoMeta(b)
		got, gerr := decodeMeta(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: % x: proto says %v, decodeMeta %v", what, b, werr, gerr)
		}
		if d := cmp.Diff(want, got); werr == nil && d != "" {
			t.Fatalf("%s: % x: decodeMeta differs (-proto +decodeMeta):\n%s", what, b, d)
		}
		// Strings taken from one copy of the entry and maps shared with
		// earlier entries (as index runs decode), twice (the second shares
		// the first's maps), must be the same.
		for range 2 {
			var shared storage.Session
			serr := decodeMetaInto(&shared, b, &strSource{b: b, s: string(b), maps: maps})
			if (werr == nil) != (serr == nil) {
				t.Fatalf("%s: % x: proto says %v, decodeMetaInto %v", what, b, werr, serr)
			}
			if d := cmp.Diff(want, &shared); werr == nil && d != "" {
				t.Fatalf("%s: % x: decodeMetaInto differs (-proto +decodeMetaInto):\n%s", what, b, d)
			}
		}
	}
	extra := func(b []byte) []byte {
		for range r.IntN(4) {
			num := protowire.Number(1 + r.IntN(20))
			switch r.IntN(4) {
			case 0:
				b = protowire.AppendTag(b, num, protowire.VarintType)
				b = protowire.AppendVarint(b, r.Uint64N(1<<40))
			case 1:
				b = protowire.AppendTag(b, num, protowire.BytesType)
				b = protowire.AppendBytes(b, []byte{0x08, byte(r.IntN(128))})
			case 2:
				b = protowire.AppendTag(b, num, protowire.Fixed32Type)
				b = protowire.AppendFixed32(b, r.Uint32())
			default:
				b = protowire.AppendTag(b, num, protowire.Fixed64Type)
				b = protowire.AppendFixed64(b, r.Uint64())
			}
		}
		return b
	}
	check("empty", nil)
	for i := range 3000 {
		b := marshalMeta(randomMeta(r))
		check(fmt.Sprint("written ", i), b)
		if i%3 == 0 {
			b = append(b, marshalMeta(randomMeta(r))...)
			check(fmt.Sprint("merged ", i), b)
		}
		b = extra(b)
		check(fmt.Sprint("with extra fields ", i), b)
		for range 4 {
			d := append([]byte(nil), b...)
			switch r.IntN(3) {
			case 0:
				if len(d) > 0 {
					d[r.IntN(len(d))] ^= byte(1 << r.IntN(8))
				}
			case 1:
				d = d[:r.IntN(len(d)+1)]
			default:
				if len(d) > 0 {
					d[r.IntN(len(d))] = 0xff
				}
			}
			check(fmt.Sprint("damaged ", i), d)
		}
	}
}

func BenchmarkDecodeMeta(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	enc := marshalMeta(randomMeta(r))
	b.Run("proto", func(b *testing.B) {
		for b.Loop() {
			_, _ = protoMeta(enc)
		}
	})
	b.Run("decodeMeta", func(b *testing.B) {
		for b.Loop() {
			_, _ = decodeMeta(enc)
		}
	})
}

package postgres

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestDecodeTally: decodeTally reads back what encodeTally writes, reads a
// tally as proto.Unmarshal would (fields repeated, unknown or of another
// wire type), and refuses bytes that do not decode.
func TestDecodeTally(t *testing.T) {
	for _, want := range []storage.Session{
		{},
		{Tally: storage.Tally{OpenToolCallIDs: []string{"c1", "c2"}, Models: []string{"m-2", "m-1"},
			Usage: storage.Usage{InputTokens: 10, OutputTokens: 3, CachedInputTokens: 1 << 40, ReasoningTokens: 7}}, TitleDerived: true},
		{Tally: storage.Tally{Models: []string{"é"}, Usage: storage.Usage{OutputTokens: 1}}},
	} {
		b, err := encodeTally(&want)
		if err != nil {
			t.Fatal(err)
		}
		var got storage.Session
		if err := decodeTally(b, &got); err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}

	var b []byte
	b = protowire.AppendTag(b, fTallyUsage, protowire.BytesType)
	b = protowire.AppendBytes(b, protowire.AppendVarint(protowire.AppendTag(nil, fUsageInput, protowire.VarintType), 5))
	b = protowire.AppendTag(b, 99, protowire.BytesType) // unknown
	b = protowire.AppendString(b, "x")
	b = protowire.AppendTag(b, fTallyModels, protowire.VarintType) // models of another wire type: unknown
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, fTallyUsage, protowire.BytesType) // merged into the first
	b = protowire.AppendBytes(b, protowire.AppendVarint(protowire.AppendTag(nil, fUsageOutput, protowire.VarintType), 6))
	b = protowire.AppendTag(b, fTallyModels, protowire.BytesType)
	b = protowire.AppendString(b, "m")
	var p sessiondv1.Session
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	var got storage.Session
	if err := decodeTally(b, &got); err != nil {
		t.Fatal(err)
	}
	u := p.GetUsage()
	want := storage.Tally{Models: p.GetModels(), Usage: storage.Usage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens()}}
	if !reflect.DeepEqual(got.Tally, want) || want.Usage.InputTokens != 5 || want.Usage.OutputTokens != 6 {
		t.Errorf("decoded %+v, want %+v as proto.Unmarshal reads it", got.Tally, want)
	}

	for _, count := range []int64{0, 1} {
		m := storage.Session{MessageCount: count}
		if err := decodeTally(nil, &m); err != nil || m.Unknown != (count > 0) {
			t.Errorf("NULL tally of a session of %d messages: unknown %v, %v; want unknown only with messages", count, m.Unknown, err)
		}
	}
	for name, bad := range map[string][]byte{
		"truncated":    {0x7a, 0x05, 0x08},
		"bad tag":      {0x00},
		"invalid utf8": {0x82, 0x01, 0x01, 0xff},
		"usage varint": {0x7a, 0x02, 0x08, 0x80},
	} {
		if err := decodeTally(bad, &storage.Session{}); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

// TestTallyFieldNumbers: the field numbers decodeTally reads are the
// Session and Usage fields of those names.
func TestTallyFieldNumbers(t *testing.T) {
	for msg, nums := range map[proto.Message]map[protoreflect.Name]protowire.Number{
		&sessiondv1.Session{}: {"open_tool_call_ids": fTallyOpenToolCallIDs, "usage": fTallyUsage, "models": fTallyModels,
			"title_derived": fTallyTitleDerived},
		&sessiondv1.Usage{}: {"input_tokens": fUsageInput, "output_tokens": fUsageOutput, "cached_input_tokens": fUsageCached,
			"reasoning_tokens": fUsageReasoning},
	} {
		fields := msg.ProtoReflect().Descriptor().Fields()
		for name, num := range nums {
			if f := fields.ByName(name); f == nil || protowire.Number(f.Number()) != num {
				t.Errorf("%s field %s: %v, want number %d", msg.ProtoReflect().Descriptor().Name(), name, f, num)
			}
		}
	}
}

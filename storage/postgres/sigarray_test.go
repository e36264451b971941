package postgres

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestSigArrayEncodesAsPgx: a sigArray is byte for byte what pgx's own
// bit[] codec sends for the same signatures, and a Map with
// sigArrayCodec sends both forms alike and still decodes bit[].
func TestSigArrayEncodesAsPgx(t *testing.T) {
	for _, texts := range [][]string{nil, {"a message"}, {"one", "two, longer", ""}} {
		sigs := make([]pgtype.Bits, len(texts))
		for i, text := range texts {
			sigs[i], _ = signature(text)
		}
		plain := pgtype.NewMap()
		want, err := plain.Encode(pgtype.BitArrayOID, pgtype.BinaryFormatCode, sigs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeSigs(sigs); !bytes.Equal(got, want) {
			t.Errorf("%q: encodeSigs = %x\nwant %x", texts, got, want)
		}

		m := pgtype.NewMap()
		bit, _ := m.TypeForOID(pgtype.BitArrayOID)
		m.RegisterType(&pgtype.Type{Name: bit.Name, OID: bit.OID, Codec: sigArrayCodec{bit.Codec}})
		for name, v := range map[string]any{"sigArray": encodeSigs(sigs), "[]pgtype.Bits": sigs} {
			got, err := m.Encode(pgtype.BitArrayOID, pgtype.BinaryFormatCode, v, []byte("prefix"))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("%q: %s encodes as %x, want %x", texts, name, got, want)
			}
		}
		var back []pgtype.Bits
		if err := m.Scan(pgtype.BitArrayOID, pgtype.BinaryFormatCode, want, &back); err != nil {
			t.Fatal(err)
		}
		if len(back) != len(sigs) {
			t.Fatalf("%q: decoded %d signatures, want %d", texts, len(back), len(sigs))
		}
		for i := range back {
			if !bytes.Equal(back[i].Bytes, sigs[i].Bytes) || back[i].Len != sigs[i].Len {
				t.Errorf("%q: signature %d decodes differently", texts, i)
			}
		}
	}
}

// BenchmarkEncodeSigs: an indexer pass's 1,350 signatures as a bit[]
// parameter, by pgx's codec and as a sigArray.
func BenchmarkEncodeSigs(b *testing.B) {
	sigs := make([]pgtype.Bits, 1350)
	for i := range sigs {
		sigs[i], _ = signature("a message of a few words")
	}
	m := pgtype.NewMap()
	bit, _ := m.TypeForOID(pgtype.BitArrayOID)
	m.RegisterType(&pgtype.Type{Name: bit.Name, OID: bit.OID, Codec: sigArrayCodec{bit.Codec}})
	for name, arg := range map[string]func() any{
		"pgx":      func() any { return sigs },
		"sigArray": func() any { return encodeSigs(sigs) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Encode(pgtype.BitArrayOID, pgtype.BinaryFormatCode, arg(), make([]byte, 0, 256)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

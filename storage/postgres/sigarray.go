package postgres

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// sigArray is an indexer pass's signatures as a bit(2048)[] parameter,
// already in PostgreSQL's binary array format. pgx encodes a
// []pgtype.Bits element by element into a buffer that starts at 256
// bytes and grows a quarter at a time, so a pass of a thousand
// signatures allocated about six times their size and copied as much;
// sigArray is built at its exact size and copied once.
type sigArray []byte

// encodeSigs returns sigs (each valid, of sigBits bits) as a sigArray.
func encodeSigs(sigs []pgtype.Bits) sigArray {
	const elem = 4 + sigBits/8 // the bit length, then the bits
	b := make([]byte, 0, 20+len(sigs)*(4+elem))
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // no NULL element
	b = binary.BigEndian.AppendUint32(b, pgtype.BitOID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(sigs)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, s := range sigs {
		b = binary.BigEndian.AppendUint32(b, elem)
		b = binary.BigEndian.AppendUint32(b, uint32(s.Len))
		b = append(b, s.Bytes...)
	}
	return sigArray(b)
}

// sigArrayCodec is pgx's bit[] codec, which also sends a sigArray as it
// is.
type sigArrayCodec struct{ pgtype.Codec }

func (c sigArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(sigArray); ok && format == pgtype.BinaryFormatCode {
		return sigArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type sigArrayPlan struct{}

func (sigArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return append(buf, value.(sigArray)...), nil
}

// registerSigArray makes conn's bit[] codec send sigArray values: the
// pool's AfterConnect.
func registerSigArray(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	if t, ok := m.TypeForOID(pgtype.BitArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: sigArrayCodec{t.Codec}})
	}
	return nil
}

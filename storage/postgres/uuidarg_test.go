package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestUUIDArgsEncodeBinary: the uuid[] parameters of the append and
// indexer statements encode in binary, with no failed attempt first.
func TestUUIDArgsEncodeBinary(t *testing.T) {
	m := pgtype.NewMap()
	id := "0190f0a2-1111-7222-8333-444455556666"
	for name, v := range map[string]any{
		"ids":      uuidArgs([]string{id, id}),
		"nullable": []*uuidArg{ptr(uuidArg(id)), nil},
	} {
		buf, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []pgtype.UUID
		if err := m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, buf, &got); err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if len(got) != 2 || !got[0].Valid || got[0].String() != id || got[1].Valid != (name == "ids") {
			t.Errorf("%s: decoded %v", name, got)
		}
	}
}

func ptr[T any](v T) *T { return &v }

package postgres

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidArg is a session id in its text form, for an element of a uuid[]
// parameter. pgx has no binary encoding of a Go string as uuid: for a
// []string it tries binary first and, failing, builds an error that
// formats the whole array before it falls back to text, which costs more
// than the statement's other parameters together. uuidArg encodes in
// binary; an id that does not parse (the rule layer lets none through)
// falls back to text as before, for PostgreSQL to refuse.
type uuidArg string

func (u uuidArg) UUIDValue() (pgtype.UUID, error) {
	b, err := uuid.Parse(string(u))
	return pgtype.UUID{Bytes: b, Valid: err == nil}, err
}

// uuidArgs is ids as uuidArg, for a uuid[] parameter.
func uuidArgs(ids []string) []uuidArg {
	out := make([]uuidArg, len(ids))
	for i, id := range ids {
		out[i] = uuidArg(id)
	}
	return out
}

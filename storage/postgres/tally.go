package postgres

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sessiond/sessiond/storage"
)

// Field numbers of sessiond.v1.Session and sessiond.v1.Usage that
// encodeTally writes.
const (
	fTallyOpenToolCallIDs, fTallyUsage, fTallyModels, fTallyTitleDerived = 14, 15, 16, 18
	fUsageInput, fUsageOutput, fUsageCached, fUsageReasoning             = 1, 2, 3, 4
)

// decodeTally fills m's tally from encodeTally's bytes; NULL marks it
// unknown when the session has messages. It reads the wire format itself:
// every listed session has a tally, and unmarshalling it into a whole
// sessiond.v1.Session allocated more than the rest of the row. Fields it
// does not know are skipped, as proto.Unmarshal keeps them aside.
func decodeTally(b []byte, m *storage.Session) error {
	if b == nil {
		m.Unknown = m.MessageCount > 0
		return nil
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case (num == fTallyOpenToolCallIDs || num == fTallyModels) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if !utf8.Valid(v) {
				return errors.New("string field holds invalid UTF-8")
			}
			if num == fTallyOpenToolCallIDs {
				m.OpenToolCallIDs = append(m.OpenToolCallIDs, string(v))
			} else {
				m.Models = append(m.Models, string(v))
			}
			b = b[n:]
		case num == fTallyUsage && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := decodeUsage(v, &m.Usage); err != nil {
				return err
			}
			b = b[n:]
		case num == fTallyTitleDerived && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.TitleDerived = v != 0
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// decodeUsage reads a sessiond.v1.Usage into u; a usage field repeated
// in b (proto's merge of embedded messages) sets it again.
func decodeUsage(b []byte, u *storage.Usage) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.VarintType || num < fUsageInput || num > fUsageReasoning {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case fUsageInput:
			u.InputTokens = int64(v)
		case fUsageOutput:
			u.OutputTokens = int64(v)
		case fUsageCached:
			u.CachedInputTokens = int64(v)
		case fUsageReasoning:
			u.ReasoningTokens = int64(v)
		}
	}
	return nil
}

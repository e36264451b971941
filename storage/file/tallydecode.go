package file

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Field numbers of sessiond.v1.Message that a tally reads (see
// storage.Tally.AddStored and msgcheck.OpenCalls), and those a derived
// title reads as well (storage.DeriveTitle).
const (
	fMsgID, fMsgRole, fMsgContent, fMsgParts = 1, 2, 3, 4
	fMsgToolCalls, fMsgToolCallID, fMsgModel = 5, 6, 11
	fMsgUsage, fMsgState                     = 12, 13
)

// tallyFields reports whether a tally (text false) or a tally and a
// derived title (text true) read field num of a message.
func tallyFields(num protowire.Number, text bool) bool {
	switch num {
	case fMsgID, fMsgRole, fMsgToolCalls, fMsgToolCallID, fMsgModel, fMsgUsage, fMsgState:
		return true
	case fMsgContent, fMsgParts:
		return text
	}
	return false
}

// decodeForTally decodes the stored messages msgs of session id as far as
// a tally reads them, and a derived title too when text is set: the other
// fields (the content and parts of a titled session, reasoning, metadata,
// created_at, name), most of a message's bytes, are left out before
// proto.Unmarshal, which then neither copies nor checks them. Replaying a
// journal at Open recounts the tally of every append this way; the
// messages themselves are checked when the session is loaded.
func decodeForTally(id string, msgs [][]byte, text bool) ([]*sessiondv1.Message, error) {
	dec := make([]*sessiondv1.Message, len(msgs))
	var kept []byte
	for i, b := range msgs {
		kept = kept[:0]
		for rest := b; len(rest) > 0; {
			num, typ, n := protowire.ConsumeTag(rest)
			if n < 0 {
				return nil, fmt.Errorf("stored message of session %s: %v: %w", id, protowire.ParseError(n), errCorrupt)
			}
			m := protowire.ConsumeFieldValue(num, typ, rest[n:])
			if m < 0 {
				return nil, fmt.Errorf("stored message of session %s: %v: %w", id, protowire.ParseError(m), errCorrupt)
			}
			if tallyFields(num, text) {
				kept = append(kept, rest[:n+m]...)
			}
			rest = rest[n+m:]
		}
		m := new(sessiondv1.Message)
		if err := proto.Unmarshal(kept, m); err != nil {
			return nil, fmt.Errorf("stored message of session %s: %v: %w", id, err, errCorrupt)
		}
		dec[i] = m
	}
	return dec, nil
}

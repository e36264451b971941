package file

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Field numbers of sessiond.v1.Session and of the messages it holds, for
// decodeMeta.
const (
	fSessID, fSessNamespace, fSessAlias, fSessTitle      = 1, 2, 3, 4
	fSessCreated, fSessUpdated, fSessRevision, fSessMsgs = 5, 6, 7, 8
	fSessSummary, fSessMetadata, fSessLabels, fSessPar   = 9, 10, 11, 12
	fSessMessages, fSessOpenTools, fSessUsage, fSessMods = 13, 14, 15, 16
	fSessExpire, fSessTitleDerived                       = 17, 18
	fSessCompaction                                      = 20
	// fSessOpenMessage is the file format's own field, not the API's: the
	// id of the session's open message (storage.Tally.OpenMessageID).
	fSessOpenMessage = 1000
)

// decodeMeta decodes an encoded sessiond.v1.Session (as marshalMeta
// writes it) straight into storage.Session, with proto.Unmarshal's rules
// (last value wins, repeated submessages merge, a field of an unexpected
// wire type is an unknown field, strings must be UTF-8), without building
// the proto first: Open decodes every checkpoint entry, and the
// intermediate messages were most of its allocations.
func decodeMeta(b []byte) (*storage.Session, error) {
	m := &storage.Session{}
	if err := decodeMetaInto(m, b, nil); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeMetaInto is decodeMeta into *m (zero), taking its strings from
// strs when b lies in strs' bytes (nil: each string its own allocation).
// On error *m holds part of the fields.
func decodeMetaInto(m *storage.Session, b []byte, strs *strSource) error {
	var (
		created, updated, expire [2]int64 // seconds, nanos
		hasExpire                bool
		tools, models            []string
		parent                   *storage.ForkOrigin
		compaction               *sessiondv1.Compaction
		labels, metadata         sharedMap // when strs shares maps
		err                      error
	)
	if strs.sharesMaps() {
		labels.pairs, metadata.pairs = strs.maps.labelPairs[:0], strs.maps.metadataPairs[:0]
	}
	werr := walkFields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if typ == protowire.VarintType {
			switch num {
			case fSessRevision:
				v, n := protowire.ConsumeVarint(b)
				m.Revision = v
				return n
			case fSessMsgs:
				v, n := protowire.ConsumeVarint(b)
				m.MessageCount = int64(v)
				return n
			case fSessTitleDerived:
				v, n := protowire.ConsumeVarint(b)
				m.TitleDerived = v != 0
				return n
			}
		}
		if (num == fSessMetadata || num == fSessLabels) && strs.sharesMaps() {
			sm := &labels
			if num == fSessMetadata {
				sm = &metadata
			}
			return sm.add(typ, b, strs)
		}
		if num == fSessMetadata && m.Metadata == nil {
			// proto.Unmarshal makes the map before it looks at the wire
			// type: a field of another type leaves an empty map, not none.
			m.Metadata = map[string]string{}
		} else if num == fSessLabels && m.Labels == nil {
			m.Labels = map[string]string{}
		}
		if num == fSessCompaction && typ == protowire.BytesType {
			// Rare (compacted sessions only): decoded as proto.Unmarshal
			// would, merging repeated occurrences.
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n
			}
			if compaction == nil {
				compaction = &sessiondv1.Compaction{}
			}
			if (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, compaction) != nil {
				return -1
			}
			return n
		}
		if num == fSessOpenMessage && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return -1
			}
			m.OpenMessageID = strs.str(v)
			return n
		}
		if typ != protowire.BytesType || num < fSessID || num > fSessExpire || num == fSessRevision || num == fSessMsgs {
			return 0
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return n
		}
		switch num {
		case fSessID, fSessNamespace, fSessAlias, fSessTitle, fSessSummary, fSessOpenTools, fSessMods:
			if !utf8.Valid(v) {
				return -1
			}
			s := strs.str(v)
			switch num {
			case fSessID:
				m.ID = s
			case fSessNamespace:
				m.Namespace = s
			case fSessAlias:
				m.Alias = s
			case fSessTitle:
				m.Title = s
			case fSessSummary:
				m.Summary = s
			case fSessOpenTools:
				tools = append(tools, s)
			case fSessMods:
				models = append(models, s)
			}
		case fSessCreated:
			err = decodeInts(v, created[:])
		case fSessUpdated:
			err = decodeInts(v, updated[:])
		case fSessExpire:
			hasExpire = true
			err = decodeInts(v, expire[:])
		case fSessUsage:
			u := [4]int64{m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CachedInputTokens, m.Usage.ReasoningTokens}
			err = decodeInts(v, u[:])
			m.Usage = storage.Usage{InputTokens: u[0], OutputTokens: u[1], CachedInputTokens: u[2], ReasoningTokens: u[3]}
		case fSessMetadata:
			err = decodeMapEntry(v, m.Metadata, strs)
		case fSessLabels:
			err = decodeMapEntry(v, m.Labels, strs)
		case fSessPar:
			if parent == nil {
				parent = &storage.ForkOrigin{}
			}
			err = decodePair(v, &parent.SessionID, nil, &parent.MessageCount, strs)
		case fSessMessages:
			// Never written in metadata; checked as proto.Unmarshal would.
			if proto.Unmarshal(v, &sessiondv1.Message{}) != nil {
				return -1
			}
		}
		if err != nil {
			return -1
		}
		return n
	})
	if werr != nil {
		return werr
	}
	if labels.seen {
		m.Labels = strs.maps.get(strs.maps.labels, labels, strs)
	}
	if metadata.seen {
		m.Metadata = strs.maps.get(strs.maps.metadata, metadata, strs)
	}
	if strs.sharesMaps() {
		strs.maps.labelPairs, strs.maps.metadataPairs = labels.pairs, metadata.pairs
	}
	m.CreatedAt = time.Unix(created[0], int64(int32(created[1]))).UTC()
	m.UpdatedAt = time.Unix(updated[0], int64(int32(updated[1]))).UTC()
	m.Parent = parent
	m.OpenToolCallIDs, m.Models = tools, models
	if hasExpire {
		m.ExpireAfter = (&durationpb.Duration{Seconds: expire[0], Nanos: int32(expire[1])}).AsDuration()
	}
	if compaction != nil {
		m.Compaction = compactionFromProto(compaction)
	}
	return nil
}

// walkFields calls field with each field of the encoded message b and the
// bytes after its tag. field returns how many bytes of the value it
// consumed, 0 to have the field skipped (unknown), or a negative number if
// the value is malformed.
func walkFields(b []byte, field func(num protowire.Number, typ protowire.Type, b []byte) int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() {
			return fmt.Errorf("session metadata: bad field tag: %w", errCorrupt)
		}
		b = b[n:]
		if n = field(num, typ, b); n == 0 {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("session metadata: field %d malformed: %w", num, errCorrupt)
		}
		b = b[n:]
	}
	return nil
}

// decodeInts decodes a message whose fields 1..len(into) are varint
// integers (Timestamp, Duration, Usage) into into, which holds the values
// so far (a repeated message merges into them).
func decodeInts(b []byte, into []int64) error {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if typ != protowire.VarintType || int(num) > len(into) {
			return 0
		}
		v, n := protowire.ConsumeVarint(b)
		into[num-1] = int64(v)
		return n
	})
}

// decodePair decodes a message of two fields: string 1 into s1, and 2
// into s2 (a string) or i2 (a varint): a map entry (key, value) or a
// ForkOrigin (session_id, message_count). Strings come from strs as in
// decodeMetaInto.
func decodePair(b []byte, s1, s2 *string, i2 *int64, strs *strSource) error {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		sp := s1
		switch {
		case num == 2 && typ == protowire.VarintType && i2 != nil:
			v, n := protowire.ConsumeVarint(b)
			*i2 = int64(v)
			return n
		case num == 2:
			sp = s2
		case num != 1:
			return 0
		}
		if sp == nil || typ != protowire.BytesType {
			return 0
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || !utf8.Valid(v) {
			return -1
		}
		*sp = strs.str(v)
		return n
	})
}

// decodeMapEntry adds the map entry b to into (never nil).
func decodeMapEntry(b []byte, into map[string]string, strs *strSource) error {
	var k, v string
	if err := decodePair(b, &k, &v, nil, strs); err != nil {
		return err
	}
	into[k] = v
	return nil
}

// strSource hands out substrings of s, a string holding b's bytes, for
// parts of b: decoding many entries costs one allocation for all their
// strings (s, a part of one copy of a buffer) instead of one per string.
// Every string it gives keeps that whole copy alive.
type strSource struct {
	b    []byte
	s    string    // the bytes of b
	maps *mapShare // nil: every entry gets maps of its own
}

// str returns string(v), sharing src's copy when v is a part of src.b.
func (src *strSource) str(v []byte) string {
	if off, ok := src.offset(v); ok {
		return src.s[off : off+len(v)]
	}
	return string(v)
}

// offset returns where v lies in src.b, if it is a part of it.
func (src *strSource) offset(v []byte) (int, bool) {
	if src == nil {
		return 0, false
	}
	// v's capacity ends where src.b's does when v was sliced from it; the
	// comparison (no allocation) makes sure, whatever v is.
	off := cap(src.b) - cap(v)
	return off, off >= 0 && off+len(v) <= len(src.s) && src.s[off:off+len(v)] == string(v)
}

func (src *strSource) sharesMaps() bool { return src != nil && src.maps != nil }

// mapShare lets the entries of one index run share their labels and
// metadata maps: sessions often carry the same labels, and a map is the
// largest allocation of an entry. Shared maps are never modified: like
// every entry's metadata, they are replaced, never changed in place.
type mapShare struct {
	labels, metadata map[string]map[string]string // by the map's encoding in the run (a part of strSource.s)
	// Scratch space for sharedMap.pairs, reused entry after entry.
	labelPairs, metadataPairs []string
}

// mapShareMax bounds the distinct maps a run remembers: past it, entries
// get maps of their own.
const mapShareMax = 256

func newMapShare() *mapShare {
	return &mapShare{labels: map[string]map[string]string{}, metadata: map[string]map[string]string{}}
}

// sharedMap collects one map field's entries while an entry is decoded.
type sharedMap struct {
	seen       bool     // the field occurs (of any wire type): the map exists, maybe empty
	start, end int      // where the field's entries lie in the strSource, from the first's length to the last's end
	shareable  bool     // start and end are known
	pairs      []string // keys and values, in order
}

// add takes one occurrence of the map field as walkFields gives it.
func (sm *sharedMap) add(typ protowire.Type, b []byte, strs *strSource) int {
	if len(sm.pairs) == 0 {
		sm.shareable = true
	}
	sm.seen = true
	if typ != protowire.BytesType {
		return 0 // skipped: an unknown field
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return n
	}
	var k, val string
	if decodePair(v, &k, &val, nil, strs) != nil {
		return -1
	}
	off, ok := strs.offset(b[:n])
	if len(sm.pairs) == 0 {
		sm.start = off
	}
	sm.end = off + n
	sm.shareable = sm.shareable && ok
	sm.pairs = append(sm.pairs, k, val)
	return n
}

// get returns the map sm decoded: one decoded earlier from the same bytes
// if there is one in share, else a new one (remembered in share).
func (ms *mapShare) get(share map[string]map[string]string, sm sharedMap, strs *strSource) map[string]string {
	var key string
	if sm.shareable && len(sm.pairs) > 0 {
		// The same bytes from the first entry's length on hold the same
		// entries in the same order.
		key = strs.s[sm.start:sm.end]
		if m, ok := share[key]; ok {
			return m
		}
	}
	m := make(map[string]string, len(sm.pairs)/2)
	for i := 0; i < len(sm.pairs); i += 2 {
		m[sm.pairs[i]] = sm.pairs[i+1]
	}
	if key != "" && len(share) < mapShareMax {
		share[key] = m
	}
	return m
}

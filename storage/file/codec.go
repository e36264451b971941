package file

import (
	"encoding/binary"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Record kinds inside a journal commit frame.
const (
	recAppend  byte = 1 // rev (8) + updated_at unix ns (8) + uvarint n + n × (uvarint len + message proto)
	recMeta    byte = 2 // rev (8) + uvarint len + Session proto: the whole metadata after the change
	recCompact byte = 5 // rev (8) + a compaction (appendCompaction), made at that revision
	recDelta   byte = 3 // rev (8) + updated_at (8) + uvarint message index + uvarint len + MessageDelta proto, as applied
	recClose   byte = 4 // rev (8) + updated_at (8) + uvarint message index + uvarint len + Message proto: the closed message
)

// metaToProto encodes session metadata for disk: the API's Session message is
// the schema of record, so new fields need no new format.
func metaToProto(m *storage.Session) *sessiondv1.Session {
	p := &sessiondv1.Session{
		Id: m.ID, Namespace: m.Namespace, Alias: m.Alias, Title: m.Title, Summary: m.Summary,
		CreatedAt: timestamppb.New(m.CreatedAt), UpdatedAt: timestamppb.New(m.UpdatedAt),
		Revision: m.Revision, MessageCount: m.MessageCount,
		Metadata: m.Metadata, Labels: m.Labels,
		OpenToolCallIds: m.OpenToolCallIDs, Models: m.Models, TitleDerived: m.TitleDerived,
	}
	if m.Parent != nil {
		p.Parent = &sessiondv1.ForkOrigin{SessionId: m.Parent.SessionID, MessageCount: m.Parent.MessageCount}
	}
	u := m.Usage
	p.Usage = &sessiondv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningTokens}
	if m.ExpireAfter > 0 {
		p.ExpireAfter = durationpb.New(m.ExpireAfter)
	}
	if c := m.Compaction; c != nil {
		p.Compaction = &sessiondv1.Compaction{ThroughMessageCount: c.ThroughCount, ThroughMessageId: c.ThroughID,
			Revision: c.Revision, CreatedAt: timestamppb.New(c.CreatedAt), SummaryMessageId: c.SummaryID}
	}
	return p
}

func sameCompaction(a, b *storage.Compaction) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ThroughCount == b.ThroughCount && a.ThroughID == b.ThroughID && a.Revision == b.Revision &&
		a.CreatedAt.Equal(b.CreatedAt) && a.SummaryID == b.SummaryID
}

func compactionFromProto(c *sessiondv1.Compaction) *storage.Compaction {
	return &storage.Compaction{ThroughCount: c.GetThroughMessageCount(), ThroughID: c.GetThroughMessageId(),
		Revision: c.GetRevision(), CreatedAt: c.GetCreatedAt().AsTime(), SummaryID: c.GetSummaryMessageId()}
}

// appendCompaction encodes a compaction: through count (8), revision (8),
// created_at unix ns (8), then the through id, the summary's id and the
// summary message, each uvarint-length-prefixed.
func appendCompaction(p []byte, c *storage.StoredCompaction) []byte {
	p = putU64(p, uint64(c.ThroughCount))
	p = putU64(p, c.Revision)
	p = putU64(p, uint64(c.CreatedAt.UnixNano()))
	p = putBytes(p, []byte(c.ThroughID))
	p = putBytes(p, []byte(c.SummaryID))
	return putBytes(p, c.Summary)
}

// readCompaction decodes what appendCompaction wrote; the summary aliases
// r's bytes.
func readCompaction(r *reader) *storage.StoredCompaction {
	c := &storage.StoredCompaction{}
	c.ThroughCount = int64(r.u64("compaction range"))
	c.Revision = r.u64("compaction revision")
	c.CreatedAt = time.Unix(0, int64(r.u64("compaction time"))).UTC()
	c.ThroughID = string(r.bytes("compaction through id"))
	c.SummaryID = string(r.bytes("compaction summary id"))
	c.Summary = r.bytes("compaction summary")
	if r.err == nil && (c.ThroughCount <= 0 || c.SummaryID == "") {
		r.fail("compaction")
	}
	return c
}

// tallyStored adds the encoded messages msgs of session id, already stored,
// to t (storage.Tally.AddStored).
func tallyStored(id string, t storage.Tally, msgs [][]byte) (storage.Tally, error) {
	dec, err := decodeStored(id, msgs)
	if err != nil {
		return t, err
	}
	return t.AddStored(dec), nil
}

// addStored replays an append of the encoded messages msgs, already
// stored, onto m's tally and title, as the append did (Tally.AddStored,
// storage.DeriveTitle).
func addStored(m *storage.Session, msgs [][]byte) error {
	dec, err := decodeForTally(m.ID, msgs, m.Title == "")
	if err != nil {
		return err
	}
	m.Tally = m.Tally.AddStored(dec)
	storage.DeriveTitle(m, dec)
	return nil
}

func decodeStored(id string, msgs [][]byte) ([]*sessiondv1.Message, error) {
	dec := make([]*sessiondv1.Message, len(msgs))
	for i, b := range msgs {
		m := new(sessiondv1.Message)
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("stored message of session %s: %v: %w", id, err, errCorrupt)
		}
		dec[i] = m
	}
	return dec, nil
}

func marshalMeta(m *storage.Session) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(metaToProto(m))
	if err != nil {
		// Only invalid UTF-8 can fail, and every string here passed validation
		// or came from a decoded proto.
		panic(fmt.Sprintf("file: marshal session metadata: %v", err))
	}
	if m.OpenMessageID != "" {
		b = protowire.AppendTag(b, fSessOpenMessage, protowire.BytesType)
		b = protowire.AppendString(b, m.OpenMessageID)
	}
	return b
}

// cloneMeta returns a copy whose maps the caller may modify.
func cloneMeta(m *storage.Session) *storage.Session {
	c := *m
	c.Metadata = maps.Clone(m.Metadata)
	c.Labels = maps.Clone(m.Labels)
	c.Tally = m.Tally.Clone()
	if m.Parent != nil {
		p := *m.Parent
		c.Parent = &p
	}
	return &c
}

// reader decodes the fixed and variable fields of a payload, remembering the
// first error so that callers check once.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("short or malformed %s: %w", what, errCorrupt)
	}
	r.b = nil
}

func (r *reader) u64(what string) uint64 {
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) byte1(what string) byte {
	if len(r.b) < 1 {
		r.fail(what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	return r.fixed(int(n), what)
}

func (r *reader) fixed(n int, what string) []byte {
	if len(r.b) < n {
		r.fail(what)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func putU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func putBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func idBytes(id string) []byte {
	u := uuid.MustParse(id)
	return u[:]
}

func idString(b []byte) string {
	var u uuid.UUID
	copy(u[:], b)
	return u.String()
}

// A snapshot file holds a session's whole state as of generation gen:
//
//	frame typeSnapHeader: gen, id, metadata
//	frames typeSnapMsgs:  the messages in order, runs of about snapRun bytes
//	frame typeSnapCompactions: the compactions, oldest first, when there are any
//	frame typeSnapEnd:    the message count, which must match
const snapRun = 256 << 10

func encodeSnapshot(gen uint64, meta *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) []byte {
	size := 64
	for _, m := range msgs {
		size += len(m) + 10
	}
	out := make([]byte, 0, size+size/64+64)
	h := []byte{typeSnapHeader}
	h = putU64(h, gen)
	h = append(h, idBytes(meta.ID)...)
	h = append(h, marshalMeta(meta)...)
	out = appendFrame(out, h)
	out = appendRuns(out, typeSnapMsgs, snapRun, len(msgs), func(i int) []byte { return msgs[i] })
	if len(cs) > 0 {
		p := binary.AppendUvarint([]byte{typeSnapCompactions}, uint64(len(cs)))
		for i := range cs {
			p = appendCompaction(p, &cs[i])
		}
		out = appendFrame(out, p)
	}
	out = appendFrame(out, putU64([]byte{typeSnapEnd}, uint64(len(msgs))))
	return out
}

// decodeSnapCompactions decodes a typeSnapCompactions frame (its payload,
// type byte first). The summaries alias p.
func decodeSnapCompactions(p []byte) ([]storage.StoredCompaction, error) {
	r := reader{b: p[1:]}
	n := r.uvarint("compaction count")
	if n == 0 || n > uint64(len(r.b)) {
		r.fail("compaction count")
	}
	var cs []storage.StoredCompaction
	for i := uint64(0); i < n && r.err == nil; i++ {
		cs = append(cs, *readCompaction(&r))
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("compactions frame")
	}
	if r.err != nil {
		return nil, r.err
	}
	return cs, nil
}

// decodeSnapshotHeader reads the first frame of a snapshot.
func decodeSnapshotHeader(data []byte) (gen uint64, meta *storage.Session, next int, err error) {
	p, next, ok := readFrame(data, 0)
	if !ok || p[0] != typeSnapHeader {
		return 0, nil, 0, fmt.Errorf("snapshot header: %w", errCorrupt)
	}
	r := reader{b: p[1:]}
	gen = r.u64("snapshot generation")
	id := r.fixed(16, "snapshot session id")
	if r.err != nil {
		return 0, nil, 0, r.err
	}
	meta, err = decodeMeta(r.b)
	if err != nil {
		return 0, nil, 0, err
	}
	if meta.ID != idString(id) {
		return 0, nil, 0, fmt.Errorf("snapshot header names session %s but holds %s: %w", idString(id), meta.ID, errCorrupt)
	}
	return gen, meta, next, nil
}

// decodeSnapshot checks and decodes a whole snapshot. A segmented snapshot
// (see segList) returns its list and no messages: the segments hold them.
// The message slices alias data.
func decodeSnapshot(data []byte) (gen uint64, meta *storage.Session, segs *segList, msgs [][]byte, cs []storage.StoredCompaction, err error) {
	gen, meta, off, err := decodeSnapshotHeader(data)
	if err != nil {
		return 0, nil, nil, nil, nil, err
	}
	for first := true; ; first = false {
		p, next, ok := readFrame(data, off)
		if !ok {
			return 0, nil, nil, nil, nil, fmt.Errorf("snapshot frame at offset %d: %w", off, errCorrupt)
		}
		off = next
		switch {
		case p[0] == typeSnapSegments && first:
			if segs, err = decodeSegList(p); err != nil {
				return 0, nil, nil, nil, nil, err
			}
			if segs.gen() != gen {
				return 0, nil, nil, nil, nil, fmt.Errorf("segment list of generation %d: base %d and %d journals do not lead to it: %w", gen, segs.base, len(segs.journals), errCorrupt)
			}
		case p[0] == typeSnapMsgs && segs == nil:
			run, err := decodeSnapRun(p)
			if err != nil {
				return 0, nil, nil, nil, nil, err
			}
			msgs = append(msgs, run...)
		case p[0] == typeSnapCompactions && segs == nil && cs == nil:
			if cs, err = decodeSnapCompactions(p); err != nil {
				return 0, nil, nil, nil, nil, err
			}
		case p[0] == typeSnapEnd:
			r := reader{b: p[1:]}
			n := r.u64("snapshot message count")
			if r.err != nil || len(r.b) != 0 {
				return 0, nil, nil, nil, nil, fmt.Errorf("snapshot end frame: %w", errCorrupt)
			}
			held := uint64(len(msgs))
			if segs != nil {
				held = n // the segments' count is checked when they are read
			}
			if segs == nil && !sameCompaction(storage.LatestCompaction(cs), meta.Compaction) {
				return 0, nil, nil, nil, nil, fmt.Errorf("snapshot's compactions do not end with its header's: %w", errCorrupt)
			}
			if n != held || int64(n) != meta.MessageCount {
				return 0, nil, nil, nil, nil, fmt.Errorf("snapshot holds %d messages, end frame says %d, header %d: %w", len(msgs), n, meta.MessageCount, errCorrupt)
			}
			if off != len(data) {
				return 0, nil, nil, nil, nil, fmt.Errorf("snapshot has %d bytes after its end frame: %w", len(data)-off, errCorrupt)
			}
			return gen, meta, segs, msgs, cs, nil
		default:
			return 0, nil, nil, nil, nil, fmt.Errorf("snapshot frame type %d at offset %d: %w", p[0], off, errCorrupt)
		}
	}
}

// decodeSnapRun decodes the messages of one typeSnapMsgs frame (its
// payload, type byte first). The slices alias p.
func decodeSnapRun(p []byte) ([][]byte, error) {
	r := reader{b: p[1:]}
	var msgs [][]byte
	for len(r.b) > 0 {
		m := r.bytes("snapshot message")
		if r.err != nil {
			return nil, r.err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func encodeJournalHead(gen uint64, id string) []byte {
	p := putU64([]byte{typeJournalHead}, gen)
	p = append(p, idBytes(id)...)
	return appendFrame(nil, p)
}

// record is one change in a journal commit frame.
type record struct {
	kind       byte
	rev        uint64
	updatedAt  time.Time
	msgs       [][]byte                  // recAppend; recClose: the one closed message
	meta       *storage.Session          // recMeta
	compaction *storage.StoredCompaction // recCompact
	index      uint64                    // recDelta, recClose: the message's index
	delta      []byte                    // recDelta: the MessageDelta as applied
}

func appendRecord(p []byte, rec record) []byte {
	p = append(p, rec.kind)
	p = putU64(p, rec.rev)
	switch rec.kind {
	case recAppend:
		p = putU64(p, uint64(rec.updatedAt.UnixNano()))
		p = binary.AppendUvarint(p, uint64(len(rec.msgs)))
		for _, m := range rec.msgs {
			p = putBytes(p, m)
		}
	case recMeta:
		p = putBytes(p, marshalMeta(rec.meta))
	case recCompact:
		p = appendCompaction(p, rec.compaction)
	case recDelta, recClose:
		p = putU64(p, uint64(rec.updatedAt.UnixNano()))
		p = binary.AppendUvarint(p, rec.index)
		if rec.kind == recDelta {
			p = putBytes(p, rec.delta)
		} else {
			p = putBytes(p, rec.msgs[0])
		}
	}
	return p
}

// encodeCommit makes the one frame a flush writes.
func encodeCommit(recs []record) []byte { return encodeCommitInto(nil, recs) }

// encodeCommitInto makes the commit frame of recs in buf, reusing its
// space: the records are encoded once, in place, with no copy.
func encodeCommitInto(buf []byte, recs []record) []byte {
	buf = append(buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, typeCommit)
	for _, r := range recs {
		buf = appendRecord(buf, r)
	}
	return finishFrame(buf)
}

// appendCommit decodes the records of one journal commit frame (its
// payload, type byte first), appending them to recs.
func appendCommit(recs []record, f []byte) ([]record, error) {
	if f[0] != typeCommit {
		return nil, fmt.Errorf("frame type %d is not a commit: %w", f[0], errCorrupt)
	}
	r := reader{b: f[1:]}
	if len(r.b) == 0 {
		return nil, fmt.Errorf("empty commit: %w", errCorrupt)
	}
	for len(r.b) > 0 && r.err == nil {
		rec := record{kind: r.byte1("record kind"), rev: r.u64("record revision")}
		switch rec.kind {
		case recAppend:
			rec.updatedAt = time.Unix(0, int64(r.u64("record time"))).UTC()
			n := r.uvarint("record message count")
			if n > uint64(len(r.b)) {
				r.fail("record message count")
				break
			}
			rec.msgs = make([][]byte, 0, min(n, 1024)) // n is not yet checked against the messages
			for j := uint64(0); j < n && r.err == nil; j++ {
				rec.msgs = append(rec.msgs, r.bytes("record message"))
			}
		case recMeta:
			b := r.bytes("record metadata")
			if r.err == nil {
				m, err := decodeMeta(b)
				if err != nil {
					return nil, err
				}
				rec.meta = m
			}
		case recCompact:
			rec.compaction = readCompaction(&r)
			if r.err == nil && rec.compaction.Revision != rec.rev {
				r.fail("compaction record revision")
			}
			rec.updatedAt = rec.compaction.CreatedAt
		case recDelta, recClose:
			rec.updatedAt = time.Unix(0, int64(r.u64("record time"))).UTC()
			rec.index = r.uvarint("record message index")
			b := r.bytes("record message")
			if rec.kind == recDelta {
				rec.delta = b
			} else {
				rec.msgs = [][]byte{b}
			}
		default:
			r.fail("record kind")
		}
		if r.err == nil {
			recs = append(recs, rec)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return recs, nil
}

// journalContent is a decoded journal.
type journalContent struct {
	gen     uint64
	id      string
	records []record
	end     int  // offset just past the last valid frame
	torn    bool // bytes after end are an incomplete last frame
}

// decodeJournal decodes a journal. A torn tail is reported, not an error;
// damage anywhere else is errCorrupt. Message slices alias data.
func decodeJournal(data []byte) (*journalContent, error) {
	frames, end, torn, err := scanFrames(data)
	if err != nil {
		return nil, err
	}
	if len(frames) == 0 || frames[0][0] != typeJournalHead {
		return nil, fmt.Errorf("journal header missing or damaged: %w", errCorrupt)
	}
	r := reader{b: frames[0][1:]}
	jc := &journalContent{gen: r.u64("journal generation"), end: end, torn: torn}
	id := r.fixed(16, "journal session id")
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("journal header: %w", errCorrupt)
	}
	jc.id = idString(id)
	// A commit holds one record but when a flush took several changes.
	jc.records = make([]record, 0, len(frames)-1)
	for i, f := range frames[1:] {
		if jc.records, err = appendCommit(jc.records, f); err != nil {
			return nil, fmt.Errorf("journal frame %d: %w", i+1, err)
		}
	}
	return jc, nil
}

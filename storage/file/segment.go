package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// A fold does not copy a session: the journal it ends becomes an immutable
// segment of the session, and the next generation's snapshot lists the
// segments (segList) instead of holding the messages. The package doc
// ("Writes") gives the files and how a load reads them.

// segRef is one segment as a segmented snapshot lists it: the bytes a load
// reads from the file, and their checksum.
type segRef struct {
	length uint64
	crc    uint32
}

// segList is what a segmented snapshot lists: snap-<base>, then journal-<base+i>
// for each journals[i].
type segList struct {
	base     uint64
	baseRef  segRef
	journals []segRef
}

func snapName(gen uint64) string { return fmt.Sprintf("snap-%016x", gen) }

// files names the segment files of l, in the order a load reads them.
func (l *segList) files() []string {
	names := make([]string, 0, len(l.journals)+1)
	names = append(names, snapName(l.base))
	for i := range l.journals {
		names = append(names, journalName(l.base+uint64(i)))
	}
	return names
}

// bytes is the size of the segments.
func (l *segList) bytes() int64 {
	n := l.baseRef.length
	for _, r := range l.journals {
		n += r.length
	}
	return int64(n)
}

// with returns a copy of l with one more journal.
func (l *segList) with(ref segRef) *segList {
	c := *l
	c.journals = append(l.journals[:len(l.journals):len(l.journals)], ref)
	return &c
}

func appendSegRef(p []byte, r segRef) []byte {
	p = putU64(p, r.length)
	return binary.LittleEndian.AppendUint32(p, r.crc)
}

// encodeSegSnapshot makes the snapshot of generation gen that lists the
// segments l and holds meta, the session's metadata.
func encodeSegSnapshot(gen uint64, meta *storage.Session, l *segList) []byte {
	h := []byte{typeSnapHeader}
	h = putU64(h, gen)
	h = append(h, idBytes(meta.ID)...)
	h = append(h, marshalMeta(meta)...)
	out := appendFrame(nil, h)
	p := putU64([]byte{typeSnapSegments}, l.base)
	p = appendSegRef(p, l.baseRef)
	p = binary.AppendUvarint(p, uint64(len(l.journals)))
	for _, r := range l.journals {
		p = appendSegRef(p, r)
	}
	out = appendFrame(out, p)
	return appendFrame(out, putU64([]byte{typeSnapEnd}, uint64(meta.MessageCount)))
}

// gen is the generation whose snapshot lists l: the one after its last
// journal.
func (l *segList) gen() uint64 { return l.base + uint64(len(l.journals)) }

// decodeSegList decodes a typeSnapSegments frame (its payload, type byte
// first).
func decodeSegList(p []byte) (*segList, error) {
	r := reader{b: p[1:]}
	l := &segList{base: r.u64("segment base generation")}
	l.baseRef = r.segRef()
	n := r.uvarint("segment count")
	if r.err == nil && n > uint64(len(r.b))/12 {
		r.fail("segment count")
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		ref := r.segRef()
		l.journals = append(l.journals, ref)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 || n == 0 {
		return nil, fmt.Errorf("malformed segment list: %w", errCorrupt)
	}
	return l, nil
}

// segRef reads a segment's length and checksum.
func (r *reader) segRef() segRef {
	ref := segRef{length: r.u64("segment length")}
	if c := r.fixed(4, "segment checksum"); r.err == nil {
		ref.crc = binary.LittleEndian.Uint32(c)
	}
	return ref
}

// readSegment reads the first ref.length bytes of path, checking them
// against ref's checksum if verify is set. A load need not: every byte of
// a segment's listed length belongs to a frame, whose own checksum the
// decoder checks, so the segment's checksum adds a second pass over the
// bytes that finds nothing more; Check (fsck) verifies it anyway.
//
// A file longer than listed with only zeros past that is a journal whose
// fold did not give back its reserved space (a crash, or a failed
// truncate): trim, if not nil, is called to cut it to the listed length.
// Other bytes past it are left as they are: no load reads them.
func readSegment(path string, ref segRef, verify bool, trim func(path string, length int64)) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("segment %s missing: %w", filepath.Base(path), errCorrupt)
		}
		return nil, err
	}
	if uint64(len(data)) < ref.length {
		return nil, fmt.Errorf("segment %s holds %d bytes, the snapshot lists %d: %w", filepath.Base(path), len(data), ref.length, errCorrupt)
	}
	long := trim != nil && uint64(len(data)) > ref.length && allZero(data[ref.length:])
	data = data[:ref.length]
	if verify && crc32.Checksum(data, castagnoli) != ref.crc {
		return nil, fmt.Errorf("segment %s fails its checksum: %w", filepath.Base(path), errCorrupt)
	}
	if long {
		trim(path, int64(ref.length))
	}
	return data, nil
}

// segmentError is an error reading one segment file, naming it for Check.
type segmentError struct {
	name string
	err  error
}

func (e *segmentError) Error() string { return e.err.Error() }
func (e *segmentError) Unwrap() error { return e.err }

// readSegments reads the messages of the segments l that the snapshot of
// generation gen of session id lists, and checks that they lead to meta,
// the snapshot's metadata; verify checks the segments' checksums too, and
// trim, if not nil, gives back space left reserved past them (see
// readSegment). The message slices alias the files' data. An error about
// one file is a *segmentError.
func readSegments(dir, id string, gen uint64, meta *storage.Session, l *segList, verify bool, trim func(path string, length int64)) ([][]byte, []storage.StoredCompaction, error) {
	fail := func(name string, err error) ([][]byte, []storage.StoredCompaction, error) {
		return nil, nil, &segmentError{name: name, err: err}
	}
	name := snapName(l.base)
	data, err := readSegment(filepath.Join(dir, name), l.baseRef, verify, trim)
	if err != nil {
		return fail(name, err)
	}
	bgen, m, inner, msgs, cs, err := decodeSnapshot(data)
	switch {
	case err != nil:
		return fail(name, err)
	case bgen != l.base || m.ID != id || inner != nil:
		return fail(name, fmt.Errorf("segment %s is not the whole snapshot of generation %d of %s: %w", name, l.base, id, errCorrupt))
	}
	msgs = msgs[:len(msgs):len(msgs)]
	for i, ref := range l.journals {
		g := l.base + uint64(i)
		name := journalName(g)
		data, err := readSegment(filepath.Join(dir, name), ref, verify, trim)
		if err != nil {
			return fail(name, err)
		}
		jc, err := decodeJournal(data)
		if err == nil && (jc.torn || jc.end != len(data)) {
			err = fmt.Errorf("segment %s ends before its listed length: %w", name, errCorrupt)
		}
		if err == nil {
			// The header holds the tallies: counting them again per segment
			// would decode every message of the session.
			m, msgs, cs, err = replay(m, msgs, cs, g, id, jc, true, false)
		}
		if err != nil {
			return fail(name, err)
		}
	}
	if m.Revision != meta.Revision || m.MessageCount != meta.MessageCount || int64(len(msgs)) != meta.MessageCount ||
		!sameCompaction(storage.LatestCompaction(cs), meta.Compaction) {
		return fail(snapshotName, fmt.Errorf("segments end at revision %d with %d messages, the snapshot of generation %d says revision %d with %d: %w",
			m.Revision, len(msgs), gen, meta.Revision, meta.MessageCount, errCorrupt))
	}
	return msgs, cs, nil
}

// sessionFileKept reports whether name, a file in the folder of a session
// whose snapshot is of generation gen and lists l (nil if whole), is one
// of its files.
func sessionFileKept(name string, gen uint64, l *segList) bool {
	if name == snapshotName || name == journalName(gen) {
		return true
	}
	if l == nil {
		return false
	}
	var g uint64
	switch {
	case strings.HasPrefix(name, "snap-"):
		return name == snapName(l.base)
	case strings.HasPrefix(name, "journal-"):
		if _, err := fmt.Sscanf(name, "journal-%016x", &g); err != nil || name != journalName(g) {
			return false
		}
		return g >= l.base && g < gen
	}
	return false
}

// isSegmentName reports whether name is a snapshot generation's or a
// journal's file name (kept or not).
func isSegmentName(name string) bool {
	return strings.HasPrefix(name, "journal-") || strings.HasPrefix(name, "snap-")
}

// foldLocked starts generation gen+1 of e without copying it: journal-<gen>
// is synced and becomes the last segment that
// the new snapshot lists (after snap-<gen>, a hard link to the whole
// snapshot, when the current snapshot is whole); then newGeneration writes
// that snapshot and the new journal. A crash before the snapshot's rename
// leaves the old generation whole (the next load sweeps the link and the
// new journal); after it, the new one. meta is e's metadata.
// Caller holds e.wmu and has loaded e.
func (s *Store) foldLocked(e *entry, meta *storage.Session) error {
	dir := s.sessionDir(e.id)
	unused := true // no snapshot lists the link made below yet
	segs := e.segs
	if segs == nil {
		path := filepath.Join(dir, snapshotName)
		data, rerr := os.ReadFile(path)
		if rerr != nil {
			return ioErr(rerr)
		}
		base := filepath.Join(dir, snapName(e.gen))
		_ = os.Remove(base) // a link an interrupted fold left
		if lerr := os.Link(path, base); lerr != nil {
			return ioErr(fmt.Errorf("keep snapshot as segment: %w", lerr))
		}
		defer func() {
			if unused {
				_ = os.Remove(base) // the snapshot of e.gen stays whole
			}
		}()
		s.step("linked")
		segs = &segList{base: e.gen, baseRef: segRef{length: uint64(len(data)), crc: crc32.Checksum(data, castagnoli)}}
	}
	// The journal is final: make it durable on its own, so that no segment
	// depends on the write-ahead log.
	if err := s.journalFile(e); err != nil {
		return err
	}
	if err := s.writePending(e); err != nil {
		return err
	}
	j := e.j
	if err := s.syncJournal(j); err != nil {
		return ioErr(fmt.Errorf("sync journal: %w", err))
	}
	s.step("synced")
	segs = segs.with(segRef{length: uint64(j.tail), crc: j.crc})
	old, tail := j.path, j.tail
	unused = false // a failing newGeneration may have renamed the snapshot
	if err := s.newGeneration(e, encodeSegSnapshot(e.gen+1, meta, segs), segs); err != nil {
		return err
	}
	// Last, so that a fold that fails (a full disk) leaves the reservation
	// to the appends; a crash before it leaves it to the next load
	// (readSegment).
	s.giveBack(old, tail)
	return nil
}

// giveBack cuts the segment journal at path to its listed length, giving
// back the space reserved past its data. A load reads only the listed
// length, so this needs no sync, and a failure only keeps the space until
// the session's next load tries again.
func (s *Store) giveBack(path string, length int64) {
	if err := os.Truncate(path, length); err != nil {
		s.log.Warn("could not give back a folded journal's reserved space", zap.String("path", path), zap.Error(err))
	}
}

// snapshotGeneration reads the generation that the snapshot at path names
// in its header frame, without checking the frame.
func snapshotGeneration(path string) (uint64, bool) {
	head, err := readHead(path, frameHeader+1+8)
	if err != nil || len(head) < frameHeader+1+8 || head[frameHeader] != typeSnapHeader {
		return 0, false
	}
	return binary.LittleEndian.Uint64(head[frameHeader+1:]), true
}

package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Frames are the unit of checksumming in every file this backend writes.
//
//	offset 0  uint32 LE  payload length n (1 <= n <= maxPayload)
//	offset 4  uint32 LE  CRC-32C (Castagnoli) of the payload
//	offset 8  n bytes    payload; payload[0] is the frame type
//	          0-7 zero bytes of padding, so that every frame starts at a
//	          multiple of 8 from the start of the file
//
// An all-zero header is never a frame: it marks the end of the data in a
// journal whose tail was reserved ahead with fallocate (which reads as zeros).
const (
	frameHeader = 8
	maxPayload  = 1 << 30
)

// Frame types.
const (
	typeSnapHeader   byte = 1  // snapshot: gen (8) + session id (16) + Session proto (metadata)
	typeSnapMsgs     byte = 2  // snapshot: a run of messages (uvarint length + proto bytes)...
	typeSnapEnd      byte = 3  // snapshot: message count (8); the last frame
	typeJournalHead  byte = 4  // journal: gen (8) + session id (16)
	typeCommit       byte = 5  // journal: the records of one flush (see record kinds)
	typeIndexHead    byte = 6  // index file: epoch (16) + namespace
	typeIndexRun     byte = 7  // index file: a run of Session protos (uvarint length + bytes)...
	_                byte = 8  // unused
	_                byte = 9  // unused
	typeCkptMark     byte = 10 // checkpoint mark: sequence number (8) + epoch (16) + log position: segment (8), offset (8)
	typeWALHead      byte = 11 // WAL segment: sequence number (8), salt (8)
	_                byte = 12 // unused
	typeSnapSegments byte = 13 // snapshot: the segments that hold its messages (see segList)
	typeWALSegBatch  byte = 14 // WAL segment: its sequence number (8) and salt (8), then the records of one flush
	_                byte = 15 // unused
	_                byte = 16 // unused
	// snapshot: uvarint count, then the session's compactions, oldest first (see appendCompaction)
	typeSnapCompactions byte = 17
	typeLast                 = typeSnapCompactions
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks bytes that failed their checksum or do not parse. It is
// internal: the store turns it into storage.ErrDataLoss for the session.
var errCorrupt = errors.New("corrupt data")

func framedLen(n int) int { return (frameHeader + n + 7) &^ 7 }

// appendFrame appends one frame with the given payload (type byte first) to
// dst.
func appendFrame(dst, payload []byte) []byte {
	var h [frameHeader]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(payload, castagnoli))
	dst = append(dst, h[:]...)
	dst = append(dst, payload...)
	for pad := framedLen(len(payload)) - frameHeader - len(payload); pad > 0; pad-- {
		dst = append(dst, 0)
	}
	return dst
}

// appendRuns appends n items, each length-prefixed, as frames of type typ:
// a frame ends before the item that would take it past limit bytes, so
// that a reader decodes a large state in pieces.
func appendRuns(dst []byte, typ byte, limit, n int, item func(i int) []byte) []byte {
	run := []byte{typ}
	for i := range n {
		b := item(i)
		if len(run) > 1 && len(run)+len(b) > limit {
			dst = appendFrame(dst, run)
			run = run[:1]
		}
		run = putBytes(run, b)
	}
	if len(run) > 1 {
		dst = appendFrame(dst, run)
	}
	return dst
}

// readFrame returns the payload of the frame at off and the offset just past
// it, or ok=false if there is no valid frame there (short, bad length, bad
// checksum, non-zero padding, or an unknown type).
func readFrame(data []byte, off int) (payload []byte, next int, ok bool) {
	if off < 0 || off+frameHeader > len(data) {
		return nil, 0, false
	}
	n := int(binary.LittleEndian.Uint32(data[off:]))
	if n < 1 || n > maxPayload || n > len(data)-off-frameHeader {
		return nil, 0, false
	}
	end := off + framedLen(n)
	if end > len(data) {
		return nil, 0, false
	}
	p := data[off+frameHeader : off+frameHeader+n]
	if p[0] < typeSnapHeader || p[0] > typeLast {
		return nil, 0, false
	}
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(data[off+4:]) {
		return nil, 0, false
	}
	for _, b := range data[off+frameHeader+n : end] {
		if b != 0 {
			return nil, 0, false
		}
	}
	return p, end, true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// scanFrames splits data into frames. It returns the valid frames, the
// offset where valid data ends, and whether the bytes after that offset are
// a torn tail.
//
// The rule that separates a torn tail from damage: the journal is written one
// flush at a time, each flush one frame written into space that reads as
// zeros, and a flush starts only after the previous one is on disk. A crash
// can therefore leave at most one incomplete frame, with nothing valid after
// it. So a bad frame followed (at any 8-byte-aligned offset) by a valid one
// is damage (errCorrupt), while a bad frame with nothing valid after it, or
// non-zero bytes where the zeros should be, is a torn tail.
func scanFrames(data []byte) (frames [][]byte, end int, torn bool, err error) {
	off := 0
	for off < len(data) {
		if allZero(data[off:]) {
			return frames, off, false, nil
		}
		p, next, ok := readFrame(data, off)
		if ok {
			frames = append(frames, p)
			off = next
			continue
		}
		for y := off + 8; y+frameHeader <= len(data); y += 8 {
			if _, _, ok := readFrame(data, y); ok {
				return frames, off, false, fmt.Errorf("bad frame at offset %d followed by a valid one at %d: %w", off, y, errCorrupt)
			}
		}
		return frames, off, true, nil
	}
	return frames, off, false, nil
}

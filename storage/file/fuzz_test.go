package file

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func fuzzMeta() *storage.Session {
	t := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	return &storage.Session{ID: "0190f5a8-3c1e-7b6a-9d2f-0123456789ab", Namespace: "ns", Alias: "al", Title: "t",
		CreatedAt: t, UpdatedAt: t, Revision: 3, MessageCount: 3, Labels: map[string]string{"a": "b"}}
}

func fuzzMsgs() [][]byte {
	var out [][]byte
	for i := range 3 {
		m := msg(fmt.Sprintf("m%d", i), fmt.Sprintf("content %d", i))
		b, _ := marshalMessages([]*sessiondv1.Message{m})
		out = append(out, b[0])
	}
	return out
}

func fuzzJournal() ([]byte, []record) {
	ms := fuzzMsgs()
	recs := []record{
		{kind: recAppend, rev: 4, updatedAt: time.Unix(0, 10).UTC(), msgs: ms[:1]},
		{kind: recAppend, rev: 5, updatedAt: time.Unix(0, 20).UTC(), msgs: ms[1:]},
	}
	m := fuzzMeta()
	m.Revision, m.MessageCount = 6, 6
	j := encodeJournalHead(1, m.ID)
	j = append(j, encodeCommit(recs[:1])...)
	j = append(j, encodeCommit(recs[1:])...)
	recs = append(recs, record{kind: recMeta, rev: 6, meta: m})
	j = append(j, encodeCommit(recs[2:])...)
	return append(j, make([]byte, 64)...), recs // reserved zeros after the data
}

// FuzzDecodeJournal: any bytes decode without panic, and what decodes is
// exactly what valid, checksummed frames hold.
func FuzzDecodeJournal(f *testing.F) {
	j, _ := fuzzJournal()
	f.Add(j)
	f.Add(j[:len(j)-70])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		jc, err := decodeJournal(data)
		if err != nil {
			return
		}
		frames, end, _, _ := scanFrames(data)
		var re []byte
		for _, p := range frames {
			re = appendFrame(re, p)
		}
		if end != jc.end || !bytes.Equal(re, data[:end]) {
			t.Fatalf("decoded frames do not re-encode to the bytes they came from")
		}
	})
}

// FuzzJournalDamage: a valid journal with a byte changed and/or cut short
// decodes to an error or to a prefix of its records, never to other data.
func FuzzJournalDamage(f *testing.F) {
	f.Add(uint16(30), byte(1), uint16(0))
	f.Add(uint16(0), byte(0), uint16(100))
	f.Add(uint16(200), byte(0x80), uint16(7))
	f.Fuzz(func(t *testing.T, pos uint16, xor byte, cut uint16) {
		j, recs := fuzzJournal()
		data := append([]byte(nil), j...)
		data[int(pos)%len(data)] ^= xor
		data = data[:len(data)-int(cut)%len(data)]
		jc, err := decodeJournal(data)
		if err != nil {
			return
		}
		if len(jc.records) > len(recs) {
			t.Fatalf("decoded %d records from a journal of %d", len(jc.records), len(recs))
		}
		for i, r := range jc.records {
			w := recs[i]
			if r.kind != w.kind || r.rev != w.rev || !r.updatedAt.Equal(w.updatedAt) && r.kind == recAppend || len(r.msgs) != len(w.msgs) {
				t.Fatalf("record %d decoded as %+v, want %+v", i, r, w)
			}
			for k := range r.msgs {
				if !bytes.Equal(r.msgs[k], w.msgs[k]) {
					t.Fatalf("record %d message %d changed", i, k)
				}
			}
			if r.kind == recMeta && !metaEqual(r.meta, w.meta) {
				t.Fatalf("record %d metadata changed", i)
			}
		}
	})
}

// FuzzDecodeSnapshot: any bytes decode without panic; a valid snapshot with
// a byte changed or cut short decodes to an error or to exactly its content.
func FuzzDecodeSnapshot(f *testing.F) {
	meta, ms := fuzzMeta(), fuzzMsgs()
	snap := encodeSnapshot(7, meta, ms, nil)
	f.Add(snap, uint16(0), byte(0), uint16(0))
	f.Add(snap, uint16(40), byte(4), uint16(0))
	f.Add([]byte{}, uint16(0), byte(0), uint16(3))
	f.Fuzz(func(t *testing.T, raw []byte, pos uint16, xor byte, cut uint16) {
		_, _, _, _, _, _ = decodeSnapshot(raw) // must not panic
		data := append([]byte(nil), snap...)
		data[int(pos)%len(data)] ^= xor
		data = data[:len(data)-int(cut)%len(data)]
		gen, m, _, got, _, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		if gen != 7 || !metaEqual(m, meta) || len(got) != len(ms) {
			t.Fatalf("damaged snapshot decoded as gen %d, %+v, %d messages", gen, m, len(got))
		}
		for i := range got {
			if !bytes.Equal(got[i], ms[i]) {
				t.Fatalf("message %d changed", i)
			}
		}
	})
}

// FuzzDecodeMark: any bytes decode without panic; a valid checkpoint mark
// with a byte changed or cut short decodes to an error or to exactly its
// content.
func FuzzDecodeMark(f *testing.F) {
	epoch := bytes.Repeat([]byte{7}, 16)
	pos := walPos{seq: 9, off: 4096}
	valid := encodeMark(5, epoch, pos)
	f.Add([]byte{}, uint16(0), byte(0), uint16(0))
	f.Add(valid, uint16(30), byte(1), uint16(0))
	f.Add(valid, uint16(20), byte(0x80), uint16(5))
	f.Fuzz(func(t *testing.T, raw []byte, at uint16, xor byte, cut uint16) {
		_, _, _, _ = decodeMark(raw) // must not panic
		data := append([]byte(nil), valid...)
		data[int(at)%len(data)] ^= xor
		data = data[:len(data)-int(cut)%len(data)]
		seq, e, p, err := decodeMark(data)
		if err != nil {
			return
		}
		if seq != 5 || !bytes.Equal(e, epoch) || p != pos {
			t.Fatalf("damaged mark decoded as seq %d, epoch %x, position %+v", seq, e, p)
		}
	})
}

// FuzzDecodeSegmentedSnapshot: a segmented snapshot (see segList) with a
// byte changed or cut short decodes to an error or to exactly its content:
// its generation, metadata and segment list.
func FuzzDecodeSegmentedSnapshot(f *testing.F) {
	meta := fuzzMeta()
	l := &segList{base: 4, baseRef: segRef{length: 4096, crc: 0xdeadbeef}, journals: []segRef{{length: 800, crc: 1}, {length: 1 << 22, crc: 2}, {length: 64, crc: 3}}}
	snap := encodeSegSnapshot(7, meta, l)
	f.Add(uint16(0), byte(0), uint16(0))
	f.Add(uint16(len(snap)-30), byte(1), uint16(0))
	f.Add(uint16(0), byte(0), uint16(9))
	f.Fuzz(func(t *testing.T, pos uint16, xor byte, cut uint16) {
		data := append([]byte(nil), snap...)
		data[int(pos)%len(data)] ^= xor
		data = data[:len(data)-int(cut)%len(data)]
		gen, m, got, msgs, _, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		if gen != 7 || !metaEqual(m, meta) || len(msgs) != 0 || !reflect.DeepEqual(got, l) {
			t.Fatalf("damaged snapshot decoded as gen %d, %+v, %+v, %d messages", gen, m, got, len(msgs))
		}
	})
}

package file

import (
	"fmt"
	"strings"

	"github.com/sessiond/sessiond/storage"
)

// An index file holds one namespace's session metadata (alias included) as
// of a checkpoint; see checkpoint.go for when it is trusted.
const (
	defaultNS   = "default"
	nsFilePref  = "ns-"
	indexRunMax = 256 << 10
)

// nsFileName names a namespace's index file. "default" cannot be a
// namespace's file because every other name has the ns- prefix.
func nsFileName(ns string) string {
	if ns == "" {
		return defaultNS
	}
	return nsFilePref + ns
}

func nsFromFileName(name string) (string, bool) {
	if name == defaultNS {
		return "", true
	}
	if ns, ok := strings.CutPrefix(name, nsFilePref); ok && storage.ValidateNamespace(ns) == nil && ns != "" {
		return ns, true
	}
	return "", false
}

func encodeIndex(epoch []byte, ns string, metas []*storage.Session) []byte {
	h := []byte{typeIndexHead}
	h = append(h, epoch...)
	h = putU64(h, uint64(len(metas)))
	h = append(h, ns...)
	out := appendFrame(nil, h)
	run := []byte{typeIndexRun}
	for _, m := range metas {
		b := marshalMeta(m)
		if len(run) > 1 && len(run)+len(b) > indexRunMax {
			out = appendFrame(out, run)
			run = run[:1]
		}
		run = putBytes(run, b)
	}
	if len(run) > 1 {
		out = appendFrame(out, run)
	}
	return out
}

// decodeIndex checks and decodes one namespace index file.
func decodeIndex(data []byte) (epoch []byte, ns string, metas []*storage.Session, err error) {
	p, off, ok := readFrame(data, 0)
	if !ok || p[0] != typeIndexHead {
		return nil, "", nil, fmt.Errorf("index header: %w", errCorrupt)
	}
	r := reader{b: p[1:]}
	epoch = r.fixed(16, "index epoch")
	count := r.u64("index count")
	if r.err != nil {
		return nil, "", nil, r.err
	}
	ns = string(r.b)
	for off < len(data) {
		p, next, ok := readFrame(data, off)
		if !ok || p[0] != typeIndexRun {
			return nil, "", nil, fmt.Errorf("index frame at %d: %w", off, errCorrupt)
		}
		off = next
		r := reader{b: p[1:]}
		for len(r.b) > 0 {
			b := r.bytes("index entry")
			if r.err != nil {
				return nil, "", nil, r.err
			}
			m, err := unmarshalMeta(b)
			if err != nil {
				return nil, "", nil, err
			}
			if m.Namespace != ns || !isSessionID(m.ID) {
				return nil, "", nil, fmt.Errorf("index entry %s of namespace %q in the file of %q: %w", m.ID, m.Namespace, ns, errCorrupt)
			}
			metas = append(metas, m)
		}
	}
	if uint64(len(metas)) != count {
		return nil, "", nil, fmt.Errorf("index holds %d entries, header says %d: %w", len(metas), count, errCorrupt)
	}
	return epoch, ns, metas, nil
}

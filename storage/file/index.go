package file

import (
	"fmt"
	"runtime"
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
	return appendRuns(out, typeIndexRun, indexRunMax, len(metas), func(i int) []byte { return marshalMeta(metas[i]) })
}

// decodeIndex checks and decodes one namespace index file. Its runs are
// decoded in parallel (a checkpoint of 100,000 sessions is some 400 runs):
// decoding the metadata is most of what an Open after a clean stop does.
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
	var runs [][]byte
	for off < len(data) {
		p, next, ok := readFrame(data, off)
		if !ok || p[0] != typeIndexRun {
			return nil, "", nil, fmt.Errorf("index frame at %d: %w", off, errCorrupt)
		}
		off = next
		runs = append(runs, p[1:])
	}
	decoded := make([][]*storage.Session, len(runs))
	errs := make([]error, len(runs))
	parallel(len(runs), runtime.GOMAXPROCS(0), func(_ *struct{}, i int) bool {
		decoded[i], errs[i] = decodeIndexRun(runs[i], ns)
		return true
	})
	for _, err := range errs {
		if err != nil {
			return nil, "", nil, err // the first in the file
		}
	}
	n := 0
	for _, d := range decoded {
		n += len(d)
	}
	if uint64(n) != count {
		return nil, "", nil, fmt.Errorf("index holds %d entries, header says %d: %w", n, count, errCorrupt)
	}
	metas = make([]*storage.Session, 0, n)
	for _, d := range decoded {
		metas = append(metas, d...)
	}
	return epoch, ns, metas, nil
}

// decodeIndexRun decodes the entries of one run of namespace ns's index.
// A run's entries share two allocations, one for their storage.Session
// values and one for their strings, and equal labels or metadata share one
// map, rather than several allocations each: Open decodes every session's
// entry. An entry replaced later keeps its run's shares alive until every
// entry of the run is replaced.
func decodeIndexRun(b []byte, ns string) ([]*storage.Session, error) {
	n := 0
	for r := (reader{b: b}); len(r.b) > 0; n++ {
		if r.bytes("index entry"); r.err != nil {
			return nil, r.err
		}
	}
	slab := make([]storage.Session, n)
	metas := make([]*storage.Session, n)
	run := string(b)
	maps := newMapShare()
	r := reader{b: b}
	for i := range slab {
		m := &slab[i]
		e := r.bytes("index entry")
		end := len(b) - len(r.b)
		if err := decodeMetaInto(m, e, &strSource{b: e, s: run[end-len(e) : end], maps: maps}); err != nil {
			return nil, err
		}
		if m.Namespace != ns || !isSessionID(m.ID) {
			return nil, fmt.Errorf("index entry %s of namespace %q in the file of %q: %w", m.ID, m.Namespace, ns, errCorrupt)
		}
		metas[i] = m
	}
	return metas, nil
}

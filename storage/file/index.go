package file

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// The index folder holds derived data only: one file per namespace with the
// metadata (alias included) of each of its sessions, and a clean mark naming
// the epoch of the files written by the last clean Close. Open trusts the
// files only when the mark is there and they carry its epoch, and removes the
// mark before anything can change; anything else is rebuilt from the session
// folders.
const (
	cleanName   = "clean"
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

// readIndexes returns the metadata the index files vouch for, for the
// sessions in ids. A missing mark, a missing or damaged file costs only a
// rescan of the sessions it would have covered.
func (s *Store) readIndexes(ids []string) map[string]*storage.Session {
	dir := filepath.Join(s.dir, "index")
	out := make(map[string]*storage.Session)
	des, err := os.ReadDir(dir)
	if err != nil {
		s.log.Warn("cannot read the index folder; rebuilding from sessions", zap.Error(err))
		return out
	}
	mark, err := os.ReadFile(filepath.Join(dir, cleanName))
	var epoch []byte
	if err == nil {
		epoch, err = hex.DecodeString(strings.TrimSpace(string(mark)))
	}
	if err != nil || len(epoch) != 16 {
		epoch = nil
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("index clean mark unreadable; rebuilding from sessions", zap.Error(err))
		} else if len(ids) > 0 {
			s.log.Info("last close was not clean; rebuilding the index from sessions")
		}
	}
	present := make(map[string]bool, len(ids))
	for _, id := range ids {
		present[id] = true
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, tmpPref) {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		want, ok := nsFromFileName(name)
		if !ok || epoch == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			s.log.Warn("index file unreadable; rebuilding it", zap.String("file", name), zap.Error(err))
			continue
		}
		fileEpoch, ns, metas, err := decodeIndex(data)
		if err == nil && ns != want {
			err = fmt.Errorf("file holds namespace %q: %w", ns, errCorrupt)
		}
		if err == nil && string(fileEpoch) != string(epoch) {
			err = errors.New("written before the last clean close")
		}
		if err != nil {
			s.log.Warn("index file damaged or stale; rebuilding it", zap.String("file", name), zap.Error(err))
			continue
		}
		for _, m := range metas {
			if present[m.ID] {
				out[m.ID] = m
			}
		}
	}
	return out
}

// writeIndexes writes every namespace's index file, then the clean mark.
// Called by Close once no write can run.
func (s *Store) writeIndexes() error {
	dir := filepath.Join(s.dir, "index")
	var epoch [16]byte
	_, _ = rand.Read(epoch[:])
	s.mu.RLock()
	byNS := make(map[string][]*storage.Session, len(s.ns))
	for _, e := range s.byID {
		// Damaged sessions keep their last known metadata: it keeps their
		// alias reserved and their acknowledged revision on record.
		if e.meta != nil && !e.gone {
			byNS[e.meta.Namespace] = append(byNS[e.meta.Namespace], e.meta)
		}
	}
	s.mu.RUnlock()
	keep := map[string]bool{cleanName: true}
	for ns, metas := range byNS {
		slices.SortFunc(metas, func(a, b *storage.Session) int { return strings.Compare(a.ID, b.ID) })
		name := nsFileName(ns)
		keep[name] = true
		if err := writeAtomic(&s.stats, filepath.Join(dir, name), encodeIndex(epoch[:], ns, metas)); err != nil {
			return err
		}
	}
	if des, err := os.ReadDir(dir); err == nil {
		for _, de := range des {
			if !keep[de.Name()] {
				_ = os.Remove(filepath.Join(dir, de.Name()))
			}
		}
	}
	return writeAtomic(&s.stats, filepath.Join(dir, cleanName), []byte(hex.EncodeToString(epoch[:])+"\n"))
}

package file

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// Checkpoints (see the package doc) spare Open a rescan of every session
// after a crash: Open trusts a checkpoint entry only for a session that no
// log record at or after the mark's position P names. So P must come
// before every change the checkpoint's metadata does not show:
//
//   - A write marks its session busy (under Store.mu) before it queues its
//     record, and clears busy only once its change is in the in-memory
//     metadata (setMeta). A checkpoint reads P, the log's end (where the
//     next flush writes), before it copies the metadata, and leaves busy
//     sessions out, so that they are rescanned. A record before P was
//     queued before P was read, so its session was busy before the copy:
//     still busy (left out), or with its change applied (copied).
//   - A record at or after P names its session, which is rescanned, with
//     the checkpoint's revision as a floor (revisions only grow) unless a
//     drop at or after P says the session was deleted since.
//   - A create writes no record: a session the checkpoint does not know is
//     scanned anyway. A fold changes no metadata. A damaged session is kept
//     (its alias and revision) and named by a touch after P, so that its
//     damage is known from the start of the next Open.
//   - A write-ahead log segment is retired only once its journals are
//     synced and a durable checkpoint's P is past it, so the records from P
//     on are still there at Open.
//   - A session the checkpoint knows whose folder is gone at Open gets a
//     drop record, so that an id used again is never mistaken for it; a
//     delete whose drop cannot be written removes the mark instead.
//   - A missing or damaged mark, a missing checkpoint folder, or damage in
//     the log from P on that names no session, means no trust: Open
//     rescans everything, as before checkpoints.
const (
	cleanName = "clean"
	ckptPref  = "ckpt-"

	defaultCkptInterval = 30 * time.Second
	defaultCkptDirty    = 4096
)

func seqName(prefix string, seq uint64) string { return fmt.Sprintf("%s%016x", prefix, seq) }

func parseSeqName(name, prefix string) (uint64, bool) {
	h, ok := strings.CutPrefix(name, prefix)
	if !ok || len(h) != 16 || strings.ToLower(h) != h {
		return 0, false
	}
	v, err := strconv.ParseUint(h, 16, 64)
	return v, err == nil
}

func encodeMark(seq uint64, epoch []byte, pos walPos) []byte {
	p := putU64([]byte{typeCkptMark}, seq)
	p = append(p, epoch...)
	p = putU64(p, pos.seq)
	p = putU64(p, uint64(pos.off))
	return appendFrame(nil, p)
}

func decodeMark(data []byte) (uint64, []byte, walPos, error) {
	p, next, ok := readFrame(data, 0)
	if !ok || p[0] != typeCkptMark || next != len(data) {
		return 0, nil, walPos{}, fmt.Errorf("checkpoint mark: %w", errCorrupt)
	}
	r := reader{b: p[1:]}
	seq := r.u64("checkpoint sequence number")
	epoch := r.fixed(16, "checkpoint epoch")
	pos := walPos{seq: r.u64("checkpoint log segment"), off: int64(r.u64("checkpoint log offset"))}
	if r.err != nil || len(r.b) != 0 || pos.off < 0 {
		return 0, nil, walPos{}, fmt.Errorf("checkpoint mark: %w", errCorrupt)
	}
	return seq, epoch, pos, nil
}

// checkpoint is what Open and Check learn from the index folder.
type checkpoint struct {
	ok     bool               // a mark and its folder
	why    string             // when not ok
	seq    uint64             // the mark's sequence number
	pos    walPos             // the mark's log position: records from there on name changed sessions
	metas  []*storage.Session // the checkpoint's entries (without those of damaged index files)
	maxSeq uint64             // the highest sequence number named in the index folder
}

// readCheckpoint reads the current checkpoint. A damaged index file costs
// only the sessions it would have covered, which the caller rescans;
// anything else wrong makes the checkpoint untrusted.
func readCheckpoint(dir string, log *zap.Logger) *checkpoint {
	idx := filepath.Join(dir, "index")
	ck := &checkpoint{}
	des, err := os.ReadDir(idx)
	if err != nil {
		ck.why = "index folder unreadable: " + err.Error()
		return ck
	}
	for _, de := range des {
		if n, ok := parseSeqName(de.Name(), ckptPref); ok {
			ck.maxSeq = max(ck.maxSeq, n)
		}
	}
	data, err := os.ReadFile(filepath.Join(idx, cleanName))
	if errors.Is(err, os.ErrNotExist) {
		ck.why = "no checkpoint"
		return ck
	}
	var epoch []byte
	if err == nil {
		ck.seq, epoch, ck.pos, err = decodeMark(data)
	}
	if err != nil {
		ck.why = "checkpoint mark unreadable: " + err.Error()
		return ck
	}
	ck.maxSeq = max(ck.maxSeq, ck.seq)
	folder := filepath.Join(idx, seqName(ckptPref, ck.seq))
	files, err := os.ReadDir(folder)
	if err != nil {
		ck.why = "checkpoint folder unreadable: " + err.Error()
		return ck
	}
	var all [][]*storage.Session
	for _, de := range files {
		want, ok := nsFromFileName(de.Name())
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(folder, de.Name()))
		var fileEpoch []byte
		var ns string
		var metas []*storage.Session
		if err == nil {
			fileEpoch, ns, metas, err = decodeIndex(data)
		}
		if err == nil && ns != want {
			err = fmt.Errorf("file holds namespace %q: %w", ns, errCorrupt)
		}
		if err == nil && string(fileEpoch) != string(epoch) {
			err = fmt.Errorf("file belongs to another checkpoint: %w", errCorrupt)
		}
		if err != nil {
			log.Warn("index file damaged; rescanning its sessions", zap.String("file", de.Name()), zap.Error(err))
			continue
		}
		all = append(all, metas)
	}
	ck.metas = slices.Concat(all...)
	ck.ok = true
	return ck
}

// reopenCheckpointDelay is how long after an Open that scanned sessions
// (after a crash) the checkpoint that spares the next Open that scan is
// written, unless enough changes ask for one sooner.
const reopenCheckpointDelay = 2 * time.Second

// ckptRetry is how soon a failed checkpoint is tried again while log
// segments wait for one: until one succeeds, they stay on disk.
const ckptRetry = 2 * time.Second

// beginWrite is called before a write changes e's files: it marks e busy,
// left out of checkpoints until the write is known to have landed (see
// setMeta), and counts the change towards the next checkpoint. Caller
// holds e.wmu.
func (s *Store) beginWrite(e *entry) {
	s.mu.Lock()
	first := e.ckptSeq != s.ckptSeq
	e.busy = true
	e.ckptSeq = s.ckptSeq
	s.mu.Unlock()
	if first {
		s.noteChange()
	}
	s.hookWrite(e)
}

// distrustCheckpoint removes the checkpoint mark, so that the next Open
// rescans every session: the way to keep the log's promise (every change
// since the checkpoint names its session) when a change cannot be named in
// it. It needs no disk space. The next checkpoint writes a new mark.
func (s *Store) distrustCheckpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	idx := filepath.Join(s.dir, "index")
	if err := os.Remove(filepath.Join(idx, cleanName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint mark: %w", ioErr(err))
	}
	if err := syncDir(idx); err != nil {
		return ioErr(err)
	}
	return nil
}

// noteChange counts a session changed or created since the last checkpoint
// and asks for one when there are enough.
func (s *Store) noteChange() {
	if s.ckptChanged.Add(1) >= int64(s.opts.ckptDirty) {
		s.kickCheckpoint()
	}
}

// kickCheckpoint asks the checkpoint loop for a checkpoint now.
func (s *Store) kickCheckpoint() {
	select {
	case s.ckptKick <- struct{}{}:
	default:
	}
}

// checkpointLoop writes checkpoints in the background until Close.
func (s *Store) checkpointLoop(now bool) {
	defer close(s.ckptDone)
	t := time.NewTicker(s.opts.ckptInterval)
	defer t.Stop()
	retry := time.NewTicker(ckptRetry)
	defer retry.Stop()
	failing := false // the last checkpoint failed: said once, not every retry
	var first <-chan time.Time
	if now {
		// Not at once: copying every session's metadata would compete for
		// the CPU with the start of serving (the first health check) just
		// when a restarted daemon is awaited.
		first = time.After(reopenCheckpointDelay)
	}
	for {
		select {
		case <-s.ckptStop:
			return
		case <-first:
			first = nil
		case <-t.C:
			if s.ckptChanged.Load() == 0 {
				continue
			}
		case <-retry.C:
			if !failing || !s.walUncovered() {
				continue
			}
		case <-s.ckptKick:
		}
		err := s.checkpoint(false)
		switch {
		case err != nil && !failing:
			s.log.Warn("could not write a checkpoint; will retry (logged again only once it succeeds)", zap.Error(err))
		case err == nil && failing:
			s.log.Info("checkpoint written again")
		}
		failing = err != nil
	}
}

// checkpoint writes every session's metadata as a new checkpoint and makes
// it current, then lets the log segments before its position go; see the
// rules at the top of this file. final says that no write can start any
// more (Close): the position is then past every record but the
// checkpoint's own, and the checkpoint covers the current segment too
// unless it named damaged sessions there. It holds Store.mu only to copy
// pointers, and no session's lock.
func (s *Store) checkpoint(final bool) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	start := time.Now()
	idx := filepath.Join(s.dir, "index")
	s.mu.Lock()
	s.ckptSeq++
	seq := s.ckptSeq
	s.mu.Unlock()
	s.ckptChanged.Store(0)
	var epoch [16]byte
	_, _ = rand.Read(epoch[:])
	// The position first, then the copy: see the rules above. A read lock
	// keeps readers going meanwhile.
	pos := s.logEnd()
	s.mu.RLock()
	byNS := make(map[string][]*storage.Session, len(s.ns))
	var damaged []string
	n := 0
	for _, e := range s.byID {
		if e.gone || e.meta == nil || e.busy {
			continue // a write in progress, or one that failed: rescanned
		}
		byNS[e.meta.Namespace] = append(byNS[e.meta.Namespace], e.meta)
		n++
		if e.damaged != nil {
			// Kept for its alias and revision, and named in the log after
			// pos, so that Open rescans it and knows its damage from the
			// start.
			damaged = append(damaged, e.id)
		}
	}
	s.mu.RUnlock()
	if err := s.walNameAll(walKindTouch, damaged); err != nil {
		return fmt.Errorf("file: checkpoint: %w", err)
	}

	folder := filepath.Join(idx, seqName(ckptPref, seq))
	err := func() error {
		if err := os.Mkdir(folder, dirPerm); err != nil {
			return ioErr(err)
		}
		for ns, metas := range byNS {
			slices.SortFunc(metas, func(a, b *storage.Session) int { return strings.Compare(a.ID, b.ID) })
			if err := writeFileSync(&s.stats, filepath.Join(folder, nsFileName(ns)), encodeIndex(epoch[:], ns, metas)); err != nil {
				return err
			}
		}
		if err := syncDir(folder); err != nil {
			return ioErr(err)
		}
		if s.hooks != nil && s.hooks.mark != nil {
			if err := s.hooks.mark(); err != nil {
				return err
			}
		}
		return writeAtomic(&s.stats, filepath.Join(idx, cleanName), encodeMark(seq, epoch[:], pos))
	}()
	if err != nil {
		_ = os.RemoveAll(folder)
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	covered := pos.seq
	if final && len(damaged) == 0 {
		covered++ // nothing after pos: the current segment too
	}
	s.walCover(covered)
	s.removeStale(seq)
	s.log.Debug("checkpoint written", zap.Uint64("seq", seq), zap.Int("sessions", n), zap.Duration("took", time.Since(start)))
	return nil
}

// removeStale removes from the index folder what is no longer of use:
// checkpoint folders other than ckpt's (the current one, 0 for none), and
// temp files.
func (s *Store) removeStale(ckpt uint64) {
	idx := filepath.Join(s.dir, "index")
	des, err := os.ReadDir(idx)
	if err != nil {
		return
	}
	for _, de := range des {
		name := de.Name()
		p := filepath.Join(idx, name)
		if n, ok := parseSeqName(name, ckptPref); ok {
			if n != ckpt {
				_ = os.RemoveAll(p)
			}
		} else if strings.HasPrefix(name, tmpPref) {
			_ = os.Remove(p)
		}
	}
}

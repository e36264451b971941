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
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// Checkpoints and the dirty set: how Open avoids rescanning every session
// after a crash.
//
// A checkpoint is a copy of every session's metadata, written in the
// background every so often (and by Close) into index/ckpt-<seq>/, and made
// current by the mark index/clean, which names its sequence number and
// epoch. Before the first change to a session's files after a checkpoint,
// the session's id is appended to the dirty file index/dirty-<seq> and
// fdatasynced; later changes to it need nothing more until the next
// checkpoint. Open trusts a checkpoint entry only for a session that no dirty
// file at or after the mark's sequence number names, and rescans the others,
// so the dirty files must cover every change the checkpoint does not show:
//
//   - A checkpoint first creates its dirty file (fsynced, folder fsynced),
//     then switches writers to it, then copies the metadata. A session whose
//     write is in progress at the copy (entry.busy) is left out of the
//     checkpoint, so it is rescanned; every other session's change after the
//     copy is recorded in the new dirty file first. Until the new mark is
//     durable the old one is in force, and its dirty set is the union of the
//     dirty files from its sequence number on, which includes the new file.
//   - Dirty files older than the mark are removed only after the mark moved.
//   - A session deleted since the checkpoint is recorded as reset, and so is
//     one the checkpoint knows that is missing at Open, so that a session
//     created again with the same id is never mistaken for the old one.
//   - A checkpoint's revision for a session only grows until it is reset, so
//     a rescanned session whose files hold less is damaged (ErrDataLoss), as
//     a trusted session's load already is.
//   - A missing, damaged or torn dirty file or mark, or a missing checkpoint
//     folder, means no trust: Open rescans everything, as before checkpoints.
//     A torn last dirty record can only be one whose write had not started,
//     but a damaged last record looks the same, so either costs a full
//     rescan rather than a guess.
const (
	cleanName = "clean"
	dirtyPref = "dirty-"
	ckptPref  = "ckpt-"

	dirtyWrite byte = 1 // the session's files changed since the checkpoint
	dirtyReset byte = 2 // the session was deleted (or vanished) since; an id reused later is a new session

	defaultCkptInterval = 30 * time.Second
	defaultCkptDirty    = 4096
)

// WithCheckpoints sets how often the metadata checkpoint is written: every
// interval while anything changed, and as soon as dirty sessions were written
// to (or created) since the last one (defaults 30 s and 4,096). Open after a
// crash rescans at most the sessions changed since the last checkpoint, so
// dirty bounds that work; each checkpoint writes every session's metadata
// once, in the background.
func WithCheckpoints(interval time.Duration, dirty int) Option {
	return func(o *options) {
		if interval > 0 {
			o.ckptInterval = interval
		}
		if dirty > 0 {
			o.ckptDirty = dirty
		}
	}
}

func seqName(prefix string, seq uint64) string { return fmt.Sprintf("%s%016x", prefix, seq) }

func parseSeqName(name, prefix string) (uint64, bool) {
	h, ok := strings.CutPrefix(name, prefix)
	if !ok || len(h) != 16 || strings.ToLower(h) != h {
		return 0, false
	}
	v, err := strconv.ParseUint(h, 16, 64)
	return v, err == nil
}

func encodeMark(seq uint64, epoch []byte) []byte {
	p := putU64([]byte{typeCkptMark}, seq)
	return appendFrame(nil, append(p, epoch...))
}

func decodeMark(data []byte) (uint64, []byte, error) {
	p, next, ok := readFrame(data, 0)
	if !ok || p[0] != typeCkptMark || next != len(data) {
		return 0, nil, fmt.Errorf("checkpoint mark: %w", errCorrupt)
	}
	r := reader{b: p[1:]}
	seq := r.u64("checkpoint sequence number")
	epoch := r.fixed(16, "checkpoint epoch")
	if r.err != nil || len(r.b) != 0 {
		return 0, nil, fmt.Errorf("checkpoint mark: %w", errCorrupt)
	}
	return seq, epoch, nil
}

// dirtyRec is one record of a dirty file.
type dirtyRec struct {
	kind byte
	id   string
}

func encodeDirtyHead(seq uint64, epoch []byte) []byte {
	p := putU64([]byte{typeDirtyHead}, seq)
	return appendFrame(nil, append(p, epoch...))
}

func encodeDirtyRun(recs []dirtyRec) []byte {
	p := make([]byte, 1, 1+17*len(recs))
	p[0] = typeDirtyRun
	for _, r := range recs {
		p = append(p, r.kind)
		p = append(p, idBytes(r.id)...)
	}
	return appendFrame(nil, p)
}

// decodeDirty decodes a dirty file. Unlike a journal, a torn tail is an
// error: see the rules above.
func decodeDirty(data []byte) (seq uint64, epoch []byte, recs []dirtyRec, err error) {
	frames, _, torn, err := scanFrames(data)
	if err != nil {
		return 0, nil, nil, err
	}
	if torn {
		return 0, nil, nil, fmt.Errorf("dirty file ends in an incomplete record: %w", errCorrupt)
	}
	if len(frames) == 0 || frames[0][0] != typeDirtyHead {
		return 0, nil, nil, fmt.Errorf("dirty file header missing or damaged: %w", errCorrupt)
	}
	r := reader{b: frames[0][1:]}
	seq = r.u64("dirty sequence number")
	epoch = r.fixed(16, "dirty epoch")
	if r.err != nil || len(r.b) != 0 {
		return 0, nil, nil, fmt.Errorf("dirty file header: %w", errCorrupt)
	}
	for i, f := range frames[1:] {
		if f[0] != typeDirtyRun || (len(f)-1)%17 != 0 || len(f) == 1 {
			return 0, nil, nil, fmt.Errorf("dirty file frame %d: %w", i+1, errCorrupt)
		}
		for b := f[1:]; len(b) > 0; b = b[17:] {
			if b[0] != dirtyWrite && b[0] != dirtyReset {
				return 0, nil, nil, fmt.Errorf("dirty file frame %d: record kind %d: %w", i+1, b[0], errCorrupt)
			}
			recs = append(recs, dirtyRec{kind: b[0], id: idString(b[1:17])})
		}
	}
	return seq, epoch, recs, nil
}

// checkpoint is what Open and Check learn from the index folder.
type checkpoint struct {
	ok     bool                        // a mark, its folder, and intact dirty files from its sequence number on
	why    string                      // when not ok
	seq    uint64                      // the mark's sequence number
	metas  map[string]*storage.Session // the checkpoint's entries (without those of damaged index files)
	dirty  map[string]byte             // sessions changed since: dirtyWrite, or dirtyReset (which wins)
	maxSeq uint64                      // the highest sequence number named in the index folder
}

// readCheckpoint reads the current checkpoint and the dirty set since it. A
// damaged index file costs only the sessions it would have covered, which
// the caller rescans; anything else wrong makes the checkpoint untrusted.
func readCheckpoint(dir string, log *zap.Logger) *checkpoint {
	idx := filepath.Join(dir, "index")
	ck := &checkpoint{metas: map[string]*storage.Session{}, dirty: map[string]byte{}}
	des, err := os.ReadDir(idx)
	if err != nil {
		ck.why = "index folder unreadable: " + err.Error()
		return ck
	}
	dirtySeqs := []uint64{}
	for _, de := range des {
		if n, ok := parseSeqName(de.Name(), dirtyPref); ok {
			dirtySeqs = append(dirtySeqs, n)
			ck.maxSeq = max(ck.maxSeq, n)
		} else if n, ok := parseSeqName(de.Name(), ckptPref); ok {
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
		ck.seq, epoch, err = decodeMark(data)
	}
	if err != nil {
		ck.why = "checkpoint mark unreadable: " + err.Error()
		return ck
	}
	ck.maxSeq = max(ck.maxSeq, ck.seq)
	haveOwn := false
	for _, n := range dirtySeqs {
		if n < ck.seq {
			continue // older than the checkpoint: covered by it
		}
		data, err := os.ReadFile(filepath.Join(idx, seqName(dirtyPref, n)))
		var fseq uint64
		var fepoch []byte
		var recs []dirtyRec
		if err == nil {
			fseq, fepoch, recs, err = decodeDirty(data)
		}
		if err == nil && fseq != n {
			err = fmt.Errorf("holds sequence number %d: %w", fseq, errCorrupt)
		}
		if err == nil && n == ck.seq && string(fepoch) != string(epoch) {
			err = fmt.Errorf("belongs to another checkpoint: %w", errCorrupt)
		}
		if err != nil {
			ck.why = fmt.Sprintf("dirty file %s: %v", seqName(dirtyPref, n), err)
			return ck
		}
		haveOwn = haveOwn || n == ck.seq
		for _, r := range recs {
			if ck.dirty[r.id] != dirtyReset {
				ck.dirty[r.id] = r.kind
			}
		}
	}
	if !haveOwn {
		ck.why = "the checkpoint's dirty file is missing"
		return ck
	}
	folder := filepath.Join(idx, seqName(ckptPref, ck.seq))
	files, err := os.ReadDir(folder)
	if err != nil {
		ck.why = "checkpoint folder unreadable: " + err.Error()
		return ck
	}
	var all [][]*storage.Session
	total := 0
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
		total += len(metas)
	}
	ck.metas = make(map[string]*storage.Session, total)
	for _, metas := range all {
		for _, m := range metas {
			ck.metas[m.ID] = m
		}
	}
	ck.ok = true
	return ck
}

// dirtyLog appends to the current dirty file, with group commit: records
// queued while a flush runs are written together by the next flush.
type dirtyLog struct {
	qmu   sync.Mutex // guards queue
	queue []*dirtyReq

	// mu serialises the flushes and the switch to a new file (which happens
	// only under Store.ckptMu): it guards j and epoch, and seq's writes.
	mu    sync.Mutex
	j     *journal // nil once closed
	seq   uint64
	epoch [16]byte

	changed atomic.Int64 // sessions dirtied or created since the switch

	// full: the store has no dirty file because the disk was full when one
	// had to be started (j is nil); writes fail with ErrNoSpace and the
	// checkpoint loop retries every noSpaceRetry.
	full atomic.Bool
}

// reopenCheckpointDelay is how long after an Open that scanned sessions
// (after a crash) the checkpoint that spares the next Open that scan is
// written, unless enough changes ask for one sooner.
const reopenCheckpointDelay = 2 * time.Second

// noSpaceRetry is how often a store whose disk was full tries again to
// start a dirty file, so that writes resume soon after space is freed.
const noSpaceRetry = 2 * time.Second

type dirtyReq struct {
	recs []dirtyRec
	done bool // set under mu
	seq  uint64
	err  error
}

// record appends recs durably and returns the sequence number of the file
// they are in.
func (s *Store) recordDirty(recs ...dirtyRec) (uint64, error) {
	d := &s.dirty
	req := &dirtyReq{recs: recs}
	d.qmu.Lock()
	d.queue = append(d.queue, req)
	d.qmu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !req.done {
		d.qmu.Lock()
		batch := d.queue
		d.queue = nil
		d.qmu.Unlock()
		var all []dirtyRec
		for _, r := range batch {
			all = append(all, r.recs...)
		}
		err := fmt.Errorf("file: dirty file: %w", storage.ErrClosed)
		if d.j == nil && d.full.Load() {
			err = fmt.Errorf("file: no dirty file, as the disk was full: %w", storage.ErrNoSpace)
		}
		if d.j != nil {
			err = s.journalWrite(d.j, encodeDirtyRun(all))
		}
		for _, r := range batch {
			r.done, r.seq, r.err = true, d.seq, err
		}
	}
	return req.seq, req.err
}

// beginWrite is called before a write changes e's files: it marks e busy
// (left out of checkpoints until the write is known to have landed, see
// setMeta) and, on the first change since the last checkpoint, or for a
// reset, records e in the dirty file. On error nothing was changed. Caller
// holds e.wmu.
func (s *Store) beginWrite(e *entry, kind byte) error {
	s.mu.Lock()
	wasBusy := e.busy
	e.busy = true
	need := kind == dirtyReset || e.dirtySeq != s.ckptSeq
	s.mu.Unlock()
	if !need {
		s.hookWrite(e)
		return nil
	}
	seq, err := s.recordDirty(dirtyRec{kind: kind, id: e.id})
	if err != nil && kind == dirtyReset && errors.Is(err, storage.ErrNoSpace) {
		// A delete must work on a full disk, as it is how space is freed.
		// With its reset unrecorded, the checkpoint must not be trusted.
		if err = s.distrustCheckpoint(); err == nil {
			s.mu.Lock()
			seq = e.dirtySeq
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	if err != nil {
		e.busy = wasBusy
	} else {
		e.dirtySeq = seq
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("record the session as changed: %w", err)
	}
	s.noteChange()
	s.hookWrite(e)
	return nil
}

// distrustCheckpoint removes the checkpoint mark, so that the next Open
// rescans every session: the way to keep the dirty files' promise when a
// change cannot be recorded in them. It needs no disk space. The next
// checkpoint writes a new mark.
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
	if s.dirty.changed.Add(1) >= int64(s.opts.ckptDirty) {
		select {
		case s.ckptKick <- struct{}{}:
		default:
		}
	}
}

// openDirty starts a new dirty file with sequence number seq and the given
// first records, durably (file and folder fsynced). It does not make it
// current.
func (s *Store) openDirty(seq uint64, epoch []byte, recs []dirtyRec) (*journal, error) {
	idx := filepath.Join(s.dir, "index")
	path := filepath.Join(idx, seqName(dirtyPref, seq))
	data := encodeDirtyHead(seq, epoch)
	if len(recs) > 0 {
		data = append(data, encodeDirtyRun(recs)...)
	}
	if err := writeFileSync(&s.stats, path, data); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, filePerm)
	if err == nil {
		err = syncDir(idx)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		_ = os.Remove(path)
		return nil, ioErr(err)
	}
	return &journal{f: f, tail: int64(len(data)), alloc: int64(len(data))}, nil
}

// checkpointLoop writes checkpoints in the background until Close.
func (s *Store) checkpointLoop(now bool) {
	defer close(s.ckptDone)
	t := time.NewTicker(s.opts.ckptInterval)
	defer t.Stop()
	retry := time.NewTicker(noSpaceRetry)
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
			if s.dirty.changed.Load() == 0 {
				continue
			}
		case <-retry.C:
			if !s.dirty.full.Load() {
				continue
			}
		case <-s.ckptKick:
		}
		full := s.dirty.full.Load()
		err := s.checkpoint()
		if full && !s.dirty.full.Load() {
			s.log.Info("the data disk has space again: writes resume")
		}
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
// it current; see the rules at the top of this file. It holds Store.mu only
// to copy pointers, and no session's lock.
func (s *Store) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	start := time.Now()
	d := &s.dirty
	idx := filepath.Join(s.dir, "index")
	seq := d.seq + 1
	var epoch [16]byte
	_, _ = rand.Read(epoch[:])
	j, err := s.openDirty(seq, epoch[:], nil)
	if err != nil {
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	d.mu.Lock()
	old := d.j
	d.j, d.seq, d.epoch = j, seq, epoch
	d.changed.Store(0)
	d.full.Store(false)
	d.mu.Unlock()
	if old != nil {
		_ = old.f.Close()
	}

	s.mu.Lock()
	s.ckptSeq = seq
	s.mu.Unlock()
	// From here on every write records its session in the new file first
	// (or is busy, and left out below), so the copy may see any state after
	// this point. A read lock keeps readers going meanwhile.
	s.mu.RLock()
	byNS := make(map[string][]*storage.Session, len(s.ns))
	var damaged []dirtyRec
	n := 0
	for _, e := range s.byID {
		if e.gone || e.meta == nil || e.busy {
			continue // a write in progress, or one that failed: rescanned
		}
		byNS[e.meta.Namespace] = append(byNS[e.meta.Namespace], e.meta)
		n++
		if e.damaged != nil {
			// Kept for its alias and revision, and rescanned at Open so
			// that its damage is known from the start.
			damaged = append(damaged, dirtyRec{kind: dirtyWrite, id: e.id})
		}
	}
	s.mu.RUnlock()
	if len(damaged) > 0 {
		if _, err := s.recordDirty(damaged...); err != nil {
			return fmt.Errorf("file: checkpoint: %w", err)
		}
	}

	folder := filepath.Join(idx, seqName(ckptPref, seq))
	err = func() error {
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
		return writeAtomic(&s.stats, filepath.Join(idx, cleanName), encodeMark(seq, epoch[:]))
	}()
	if err != nil {
		_ = os.RemoveAll(folder)
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	s.removeStale(seq, seq)
	s.log.Debug("checkpoint written", zap.Uint64("seq", seq), zap.Int("sessions", n), zap.Duration("took", time.Since(start)))
	return nil
}

// removeStale removes from the index folder what is no longer of use:
// checkpoint folders other than ckpt's (the current one, 0 for none), dirty
// files before dirtyFrom, and temp files. Later dirty files are kept: they
// are in use.
func (s *Store) removeStale(ckpt, dirtyFrom uint64) {
	idx := filepath.Join(s.dir, "index")
	des, err := os.ReadDir(idx)
	if err != nil {
		return
	}
	for _, de := range des {
		name := de.Name()
		p := filepath.Join(idx, name)
		if n, ok := parseSeqName(name, dirtyPref); ok {
			if n < dirtyFrom {
				_ = os.Remove(p)
			}
		} else if n, ok := parseSeqName(name, ckptPref); ok {
			if n != ckpt {
				_ = os.RemoveAll(p)
			}
		} else if strings.HasPrefix(name, tmpPref) {
			_ = os.Remove(p)
		}
	}
}

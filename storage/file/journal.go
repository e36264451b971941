package file

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// journal is a session's journal file (or a log segment), and what a
// write needs to know about it. The store owns its files while it holds the
// data dir's lock, so tail, written and alloc stay true while the file is
// closed.
type journal struct {
	// f is nil while closed: a session's journal file is opened by its
	// first write (journalFile) and closed again to keep the open journal
	// files within WithMaxOpenJournals. The current log segment's is always open.
	f    *os.File
	path string
	// tail is the end of the acknowledged data: the next frame goes here.
	// A log segment's data is all in its file; a session journal's ends at
	// written, followed by pending (see pending.go).
	tail int64
	// crc is the CRC-32C of a session journal's bytes up to tail, kept as
	// frames are written so that a fold lists the journal's checksum
	// without reading it back. Log segments do not keep it.
	crc uint32
	// zeroFill reserves space by writing zeros instead of fallocate (log
	// segments, whose every flush is synced): a flush into fallocated space
	// converts unwritten extents, a metadata change the file system
	// journals at each fdatasync, where overwriting written blocks makes
	// the fdatasync write data only.
	zeroFill bool

	// mu guards what follows in a session journal: its owner (holding the
	// session's wmu), a flush's leader and the sealer all reach them.
	mu         sync.Mutex
	written    int64  // end of the data in the file
	pending    []byte // the frames from written to tail, durable in the log only
	alloc      int64  // file size: bytes past the data are reserved, and read as zeros
	noPrealloc bool   // the file system cannot fallocate
}

// sessionJournal is the journal of a session whose file at path holds
// data, all of it acknowledged, and is size bytes long.
func sessionJournal(path string, data []byte, size int64) *journal {
	n := int64(len(data))
	return &journal{path: path, tail: n, written: n, alloc: size, crc: crc32.Checksum(data, castagnoli)}
}

// journalFiles bounds the session journal files the store keeps open (see
// the package doc, "Open files").
//
// Only the holder of a session's wmu opens or closes its journal file: the
// session's own writer, or acquireJournalSlot, which TryLocks the sessions
// it closes and so passes over those being written. Should every open
// journal belong to a session being written, it waits for one of those
// writes to end (Store.unlock wakes it). A writer holds one session's wmu
// at a time and needs no second slot while its journal is open, so the
// wait ends.
type journalFiles struct {
	mu      sync.Mutex
	max     int
	open    int           // journal files open, or about to be opened: at most max
	peak    int           // the most open has been, for tests
	reopens int64         // journal file opens (each written session's first, and after a close), for tests
	lru     *list.List    // of *entry whose j.f is open, most recently written first
	wake    chan struct{} // closed and replaced to wake acquireJournalSlot's waiters
	waiters atomic.Int32
}

// wakeLocked wakes the writers waiting for a journal slot. Caller holds mu.
func (p *journalFiles) wakeLocked() {
	if p.waiters.Load() > 0 {
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// unlock releases e's write lock, waking writers that wait for a journal
// slot: e's journal may be closeable now. Every write path unlocks through
// it; a missed wake-up would cost acquireJournalSlot a short timeout only.
func (s *Store) unlock(e *entry) {
	e.wmu.Unlock()
	if s.jfiles.waiters.Load() > 0 {
		s.jfiles.mu.Lock()
		s.jfiles.wakeLocked()
		s.jfiles.mu.Unlock()
	}
}

// acquireJournalSlot reserves room for one more open journal file. At the
// bound it closes the least recently written journal whose session no one
// is writing, or, if there is none, waits until there is. Caller holds
// e.wmu, and e's journal file is closed.
func (s *Store) acquireJournalSlot(e *entry) {
	p := &s.jfiles
	p.mu.Lock()
	if p.open < p.max {
		p.open++
		p.peak = max(p.peak, p.open)
		p.mu.Unlock()
		return
	}
	// Counted before the sessions are tried, so that an unlock after a
	// failed TryLock sees the waiter and wakes it.
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	for {
		if p.open < p.max {
			p.open++
			p.peak = max(p.peak, p.open)
			p.mu.Unlock()
			return
		}
		for el := p.lru.Back(); el != nil; el = el.Prev() {
			o := el.Value.(*entry)
			if o == e || !o.wmu.TryLock() {
				continue // being written: its writer closes nothing it uses
			}
			p.lru.Remove(el)
			o.jelem = nil
			p.mu.Unlock()
			// The slot passes from o to e: closed before e's opens.
			_ = o.j.f.Close()
			o.j.f = nil
			o.wmu.Unlock()
			return
		}
		wake := p.wake
		p.mu.Unlock()
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		p.mu.Lock()
	}
}

// releaseJournalSlot gives back a slot whose file is closed (or was never
// opened). Caller holds e.wmu.
func (s *Store) releaseJournalSlot(e *entry) {
	p := &s.jfiles
	p.mu.Lock()
	if e.jelem != nil {
		p.lru.Remove(e.jelem)
		e.jelem = nil
	}
	p.open--
	p.wakeLocked()
	p.mu.Unlock()
}

// journalFile makes sure e's journal file is open for a write, and marks it
// the most recently written. Caller holds e.wmu and has loaded e.
func (s *Store) journalFile(e *entry) error {
	j := e.j
	if j.f != nil {
		s.jfiles.mu.Lock()
		if e.jelem != nil {
			s.jfiles.lru.MoveToFront(e.jelem)
		}
		s.jfiles.mu.Unlock()
		return nil
	}
	s.acquireJournalSlot(e)
	f, err := os.OpenFile(j.path, os.O_RDWR, filePerm)
	if err != nil {
		s.releaseJournalSlot(e)
		return ioErr(fmt.Errorf("open journal: %w", err))
	}
	j.f = f
	s.jfiles.mu.Lock()
	e.jelem = s.jfiles.lru.PushFront(e)
	s.jfiles.reopens++
	s.jfiles.mu.Unlock()
	return nil
}

// writeJournal appends frame durably to e's journal, opening its file if
// needed: its record goes into the write-ahead log, whose flush makes it
// durable (see wal.go), and the frame then waits for the journal's file
// with the journal's other pending bytes (see pending.go). appends is how
// many appends the frame holds, for the flush record. A write that fails
// leaves nothing a reader can see, and its error is storage.ErrNoSpace or
// storage.ErrUnavailable. Caller holds e.wmu and has loaded e.
func (s *Store) writeJournal(e *entry, frame []byte, appends int) error {
	if err := s.journalFile(e); err != nil {
		return writeFailed(err) // nothing was written
	}
	j := e.j
	if s.pendingFull(j) {
		if err := s.writePending(e); err != nil {
			return writeFailed(err)
		}
	}
	if e.walReq == nil {
		e.walReq = &walReq{}
	}
	req := e.walReq
	*req = walReq{rec: walRec{kind: walKindFrame, id: e.id, gen: e.gen, off: j.tail, frame: frame}, j: j, appends: appends, wake: req.wake}
	err := s.walCommit(req)
	req.rec.frame, req.j = nil, nil // the caller reuses the frame's buffer
	if err != nil {
		return writeFailed(err)
	}
	j.tail += int64(len(frame))
	j.crc = crc32.Update(j.crc, castagnoli, frame)
	return nil
}

// reserveJournalSlot closes e's journal file, keeping its slot, or takes a
// slot if the file was closed; releaseJournalSlot gives it back. Caller
// holds e.wmu.
func (s *Store) reserveJournalSlot(e *entry) {
	if e.j == nil || e.j.f == nil {
		s.acquireJournalSlot(e)
		return
	}
	_ = e.j.f.Close()
	e.j.f = nil
	s.jfiles.mu.Lock()
	if e.jelem != nil {
		s.jfiles.lru.Remove(e.jelem)
		e.jelem = nil
	}
	s.jfiles.mu.Unlock()
}

// closeJournalFile closes e's journal file if it is open. e keeps its
// journal state; the next write reopens the file. Caller holds e.wmu.
func (s *Store) closeJournalFile(e *entry) {
	if e.j == nil || e.j.f == nil {
		return
	}
	_ = e.j.f.Close()
	e.j.f = nil
	s.releaseJournalSlot(e)
}

// closeJournalFiles closes every open journal file, at Close.
func (s *Store) closeJournalFiles() {
	s.jfiles.mu.Lock()
	var open []*entry
	for el := s.jfiles.lru.Front(); el != nil; el = el.Next() {
		open = append(open, el.Value.(*entry))
	}
	s.jfiles.mu.Unlock()
	for _, e := range open {
		// A load may still hold the lock: Close waits for writes only.
		e.wmu.Lock()
		s.closeJournalFile(e)
		e.wmu.Unlock()
	}
}

// Preallocation sizes: reserve ahead so that most flushes are data-only
// fdatasyncs, doubling up to a cap so that small sessions stay small.
const (
	preallocMin = 16 << 10
	preallocMax = 1 << 20
)

// loadLocked brings e's state into memory if it is not there: the snapshot,
// then the journal, trimming a torn last record. Caller holds e.wmu.
func (s *Store) loadLocked(e *entry) error {
	s.mu.RLock()
	damaged, gone := e.damaged, e.gone
	s.mu.RUnlock()
	if gone {
		return fmt.Errorf("file: session %s: %w", e.id, storage.ErrNotFound)
	}
	if damaged != nil {
		return damaged
	}
	if e.view.Load() != nil && e.j != nil {
		s.reads.hits.Add(1)
		s.touch(e)
		return nil
	}
	s.reads.misses.Add(1)
	s.mu.RLock()
	var known uint64
	if e.meta != nil {
		known = e.meta.Revision
	}
	s.mu.RUnlock()
	meta, msgs, cs, gen, segs, j, err := s.readSession(e.id, known)
	if err != nil {
		if errors.Is(err, errCorrupt) {
			err = damage(e.id, err)
			s.markDamaged(e, err)
			return err
		}
		return fmt.Errorf("file: load session %s: %w", e.id, ioErr(err))
	}
	ids, err := indexIDs(msgs)
	if err != nil {
		err = damage(e.id, err)
		s.markDamaged(e, err)
		return err
	}
	e.j, e.gen, e.segs, e.ids = j, gen, segs, ids
	e.view.Store(newView(meta, msgs, cs))
	s.mu.RLock()
	same := e.meta != nil && metaEqual(e.meta, meta)
	s.mu.RUnlock()
	if !same {
		s.setMeta(e, meta) // the index was stale: the files are the truth
	} else {
		s.mu.Lock()
		e.busy = false // meta matches the files just read
		s.mu.Unlock()
	}
	s.touch(e)
	return nil
}

// markDamaged records that e's files are damaged. Checkpoints leave the
// session out from then on, so that an open after a crash rescans it and
// knows from the start. Caller holds e.wmu.
func (s *Store) markDamaged(e *entry, err error) {
	s.mu.Lock()
	e.damaged = err
	s.mu.Unlock()
	s.log.Error("session is damaged", zap.String("session", e.id), zap.Error(err))
}

// indexIDs maps the stored messages' ids to their indexes.
func indexIDs(msgs [][]byte) (map[string]int, error) {
	ids := make(map[string]int, len(msgs))
	for i, b := range msgs {
		id, err := messageID(b)
		if err != nil {
			return nil, err
		}
		ids[id] = i
	}
	return ids, nil
}

// messageID reads a stored message's id.
func messageID(b []byte) (string, error) {
	var m sessiondv1.Message
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("stored message: %v: %w", err, errCorrupt)
	}
	if m.Id == "" {
		return "", fmt.Errorf("stored message has no id: %w", errCorrupt)
	}
	return m.Id, nil
}

// readSession reads a session's files. The journal it returns is closed:
// reads need no descriptor kept, and the first write opens it.
//
// known is the revision the store last knew the session at (0 if none):
// files that hold less lost acknowledged changes (a truncated journal looks
// like a crash's torn tail on its own).
func (s *Store) readSession(id string, known uint64) (*storage.Session, [][]byte, []storage.StoredCompaction, uint64, *segList, *journal, error) {
	fail := func(err error) (*storage.Session, [][]byte, []storage.StoredCompaction, uint64, *segList, *journal, error) {
		return nil, nil, nil, 0, nil, nil, err
	}
	dir := s.sessionDir(id)
	data, err := os.ReadFile(filepath.Join(dir, snapshotName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("snapshot missing: %w", errCorrupt)
		}
		return fail(err)
	}
	gen, meta, segs, msgs, cs, err := decodeSnapshot(data)
	if err != nil {
		return fail(err)
	}
	if meta.ID != id {
		return fail(fmt.Errorf("snapshot holds session %s: %w", meta.ID, errCorrupt))
	}
	// Journals and snapshot generations the snapshot does not use are
	// leftovers of an interrupted fold or save: the snapshot already holds
	// (or never held) what they say.
	if des, err := os.ReadDir(dir); err == nil {
		for _, de := range des {
			n := de.Name()
			if strings.HasPrefix(n, tmpPref) || (isSegmentName(n) && !sessionFileKept(n, gen, segs)) {
				_ = os.Remove(filepath.Join(dir, n))
			}
		}
	}
	if segs != nil {
		if msgs, cs, err = readSegments(dir, id, gen, meta, segs, false, s.giveBack); err != nil {
			return fail(err)
		}
	}
	jpath := filepath.Join(dir, journalName(gen))
	jdata, err := os.ReadFile(jpath)
	if errors.Is(err, os.ErrNotExist) {
		// A crash between a snapshot's rename and the journal's creation
		// becoming durable: nothing can have been appended yet.
		if err := writeFileSync(&s.stats, jpath, encodeJournalHead(gen, id)); err != nil {
			return fail(err)
		}
		if err := syncDir(dir); err != nil {
			return fail(err)
		}
		jdata = encodeJournalHead(gen, id)
	} else if err != nil {
		return fail(err)
	}
	jc, err := decodeJournal(jdata)
	if err != nil {
		return fail(err)
	}
	msgs = msgs[:len(msgs):len(msgs)]
	meta, msgs, cs, err = replay(meta, msgs, cs, gen, id, jc, true, true)
	if err != nil {
		return fail(err)
	}
	if meta.Revision < known {
		return fail(fmt.Errorf("files hold revision %d, but revision %d was acknowledged: %w", meta.Revision, known, errCorrupt))
	}
	j := sessionJournal(jpath, jdata[:jc.end], int64(len(jdata)))
	if jc.torn || (j.alloc > j.tail && !allZero(jdata[jc.end:])) {
		// Only an incomplete last flush can be here, never acknowledged.
		// Cut it off (and give back the zeros) so that the next flush cannot
		// end up next to its remains.
		s.log.Warn("trimming an incomplete last journal record", zap.String("session", id),
			zap.Int64("valid_bytes", j.tail), zap.Int64("file_bytes", j.alloc))
		if err := truncateSync(jpath, j.tail); err != nil {
			return fail(err)
		}
		j.alloc = j.tail
	}
	return meta, msgs, cs, gen, segs, j, nil
}

// journalWrite appends one frame to a log segment and makes it durable
// with one fdatasync. On error nothing of the frame stays in the file.
func (s *Store) journalWrite(j *journal, frame []byte) error {
	if err := s.journalPut(j, j.tail, frame); err != nil {
		return err
	}
	if err := s.syncJournal(j); err != nil {
		s.cutJournal(j, j.tail)
		return ioErr(fmt.Errorf("journal append: %w", err))
	}
	j.tail += int64(len(frame))
	return nil
}

// cutJournal cuts what may have landed past off; the reserved space goes
// with it and is reserved again by the next write.
func (s *Store) cutJournal(j *journal, off int64) {
	_ = j.f.Truncate(off)
	_ = j.f.Sync()
	j.alloc = off
}

// journalPut writes data at off, the end of the journal file's data,
// reserving space ahead (see preallocMin), without syncing. On error
// nothing of data stays in the file.
func (s *Store) journalPut(j *journal, off int64, data []byte) error {
	if j.f == nil {
		return fmt.Errorf("journal %s is not open", j.path) // a caller skipped journalFile
	}
	need := off + int64(len(data))
	if need > j.alloc && !j.noPrealloc {
		size := max(j.alloc*2, preallocMin, need)
		size = min(size, need+preallocMax)
		size = (size + 4095) &^ 4095
		reserve := fallocate
		if j.zeroFill {
			reserve = writeZeros
		}
		err := reserve(j.f, j.alloc, size-j.alloc)
		if err != nil && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) && size > need {
			err = reserve(j.f, j.alloc, need-j.alloc)
			size = need
		}
		if err == nil && j.zeroFill {
			err = j.f.Sync() // see writeZeros
		}
		switch {
		case err == nil:
			j.alloc = size
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
			j.noPrealloc = true
		default:
			_ = j.f.Truncate(off)
			j.alloc = off
			return ioErr(fmt.Errorf("reserve journal space: %w", err))
		}
	}
	n, err := j.f.WriteAt(data, off)
	s.stats.bytesWritten.Add(int64(n))
	if err != nil {
		s.cutJournal(j, off)
		return ioErr(fmt.Errorf("journal append: %w", err))
	}
	if need > j.alloc {
		j.alloc = need
	}
	return nil
}

// zeroBlock is the source of writeZeros.
var zeroBlock [128 << 10]byte

// writeZeros writes n zero bytes to f at off. Like fallocate's, the space
// holds no data yet, so it is not counted in bytesWritten. Its caller syncs
// the zeros before any flush writes into them: their block allocation must
// be committed on its own, or it rides in the flush's filesystem journal
// transaction, and an fdatasync that ext4 confirms after its journal
// aborted is lost at repair.
func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		k, err := f.WriteAt(zeroBlock[:min(n, int64(len(zeroBlock)))], off)
		if err != nil {
			return err
		}
		off += int64(k)
		n -= int64(k)
	}
	return nil
}

// syncJournal fdatasyncs j (after the test hook sync, which can fail it).
func (s *Store) syncJournal(j *journal) error {
	if s.hooks != nil && s.hooks.sync != nil {
		if err := s.hooks.sync(); err != nil {
			return err
		}
	}
	s.stats.journalSyncs.Add(1)
	return fdatasync(j.f)
}

// rewriteLocked writes e's whole state as a new snapshot generation with an
// empty journal (newGeneration), then removes the old journal and
// segments. A crash anywhere leaves the old or the new state. A save or
// rewind replaces the session's content, so it writes it whole; a fold
// appends (foldLocked). Caller holds e.wmu and has loaded e.
func (s *Store) rewriteLocked(e *entry, meta *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) error {
	old, segs, oldj := e.gen, e.segs, e.j
	if err := s.newGeneration(e, encodeSnapshot(old+1, meta, msgs, cs), nil); err != nil {
		return err
	}
	s.discardPending(oldj)
	// The new snapshot holds everything. (A crash before the removals
	// leaves the files to the next load's sweep.)
	dir := s.sessionDir(e.id)
	_ = os.Remove(filepath.Join(dir, journalName(old)))
	if segs != nil {
		for _, n := range segs.files() {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	return nil
}

// newGeneration makes snap, the encoded snapshot of generation e.gen+1
// (listing segs), e's snapshot, with an empty journal, atomically: new
// journal created and fsynced, snapshot written to a temp file, fsynced,
// renamed over the old one, folder fsynced. Before the rename the old
// generation is whole: the next load sweeps the new journal. Caller holds
// e.wmu and has loaded e.
func (s *Store) newGeneration(e *entry, snap []byte, segs *segList) error {
	dir := s.sessionDir(e.id)
	gen := e.gen + 1
	jpath := filepath.Join(dir, journalName(gen))
	head := encodeJournalHead(gen, e.id)
	// The new journal is written in e's journal slot, so that a rewrite
	// never has more journal files open than the bound. The new journal's
	// file is opened by the next write; after a failure the next write
	// reopens the old one.
	s.reserveJournalSlot(e)
	defer s.releaseJournalSlot(e)
	if err := writeFileSync(&s.stats, jpath, head); err != nil {
		return err
	}
	s.step("journal")
	spath := filepath.Join(dir, snapshotName)
	if err := writeAtomic(&s.stats, spath, snap); err != nil {
		if g, ok := snapshotGeneration(spath); ok && g == gen {
			// Renamed, but the folder's sync failed: the files hold the
			// new generation, with its journal, at least until a power
			// failure. What e knows may no longer match them: the next
			// access reads them again. They hold every pending frame.
			s.discardPending(e.j)
			s.forget(e)
			return err
		}
		_ = os.Remove(jpath)
		return err
	}
	s.step("renamed")
	e.j = sessionJournal(jpath, head, int64(len(head)))
	e.gen, e.segs = gen, segs
	return nil
}

// createFiles makes a new session folder atomically: built under a temp
// name, fsynced, renamed into place, parent fsynced.
func (s *Store) createFiles(meta *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) (*journal, error) {
	root := filepath.Join(s.dir, "sessions")
	tmp := filepath.Join(root, tmpPref+meta.ID+"-"+randSuffix())
	if err := os.Mkdir(tmp, dirPerm); err != nil {
		return nil, ioErr(err)
	}
	fail := func(err error) (*journal, error) {
		_ = os.RemoveAll(tmp)
		return nil, ioErr(err)
	}
	head := encodeJournalHead(1, meta.ID)
	if err := writeFileSync(&s.stats, filepath.Join(tmp, journalName(1)), head); err != nil {
		return fail(err)
	}
	if err := writeFileSync(&s.stats, filepath.Join(tmp, snapshotName), encodeSnapshot(1, meta, msgs, cs)); err != nil {
		return fail(err)
	}
	if err := syncDir(tmp); err != nil {
		return fail(err)
	}
	final := s.sessionDir(meta.ID)
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, os.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			_ = os.RemoveAll(tmp)
			return nil, fmt.Errorf("file: session folder %s exists: %w", final, storage.ErrAlreadyExists)
		}
		return fail(err)
	}
	if err := syncDir(root); err != nil {
		return nil, ioErr(err)
	}
	// The journal's file is opened by the first write: a session that is
	// only created holds no descriptor.
	return sessionJournal(filepath.Join(final, journalName(1)), head, int64(len(head))), nil
}

// removeFiles deletes a session folder: renamed out of the way first (the
// rename is the durable point), then removed; Open sweeps what a crash
// leaves.
func (s *Store) removeFiles(id string) error {
	root := filepath.Join(s.dir, "sessions")
	gone := filepath.Join(root, delPref+id+"-"+randSuffix())
	if err := os.Rename(s.sessionDir(id), gone); err != nil {
		return ioErr(err)
	}
	if err := syncDir(root); err != nil {
		return err
	}
	if err := os.RemoveAll(gone); err != nil {
		s.log.Warn("could not remove deleted session's files; the next open does", zap.String("path", gone), zap.Error(err))
	}
	return nil
}

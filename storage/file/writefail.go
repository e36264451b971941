package file

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// A write that fails after its frame reached the journal's file (its WAL
// flush failed) was never acknowledged, so no reader may see it. The frame
// is cut off the journal again; when the disk refuses even that (an ext4
// filesystem aborted under errors=remount-ro refuses every write), the
// store remembers the journal's acknowledged length in the entry
// (journalCut): a load of the session reads the journal only up to it, and
// the session's next write cuts the file before writing. The session's
// in-memory state stays at its last acknowledged change throughout.
//
// What is remembered lives in memory: were the process to restart while a
// cut is pending on a disk that kept the frame (one that came back without
// losing its page cache), a load would read it. An aborted filesystem
// keeps nothing that was not durable, so its restart does not.

// journalCut is the acknowledged length of a session's journal of
// generation gen, which its file may exceed until it is cut back.
type journalCut struct {
	gen  uint64
	size int64
}

// ErrIO is the store's error when the data dir's disk fails a read or
// write (EIO), or a write fails for a reason the store cannot name. It
// wraps storage.ErrUnavailable: the session keeps its last acknowledged
// state, and the call may succeed once the disk is repaired.
var ErrIO = fmt.Errorf("file: the data dir's disk failed a read or write (the kernel log says why): %w", storage.ErrUnavailable)

// writeFailed classifies a failed write's error for clients: a full disk
// stays storage.ErrNoSpace and a closed store storage.ErrClosed; every
// other failure is storage.ErrUnavailable (ErrIO unless it already is),
// never an error a server would answer INTERNAL.
func writeFailed(err error) error {
	if errors.Is(err, storage.ErrNoSpace) || errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// cutFailedWrite cuts what a failed write may have left past off, the
// journal's acknowledged length, and fdatasyncs the cut. When the disk
// refuses, e remembers off (see journalCut) and its journal file is
// closed: the next write reopens it and cuts first. Caller holds e.wmu,
// and e's journal file is open.
func (s *Store) cutFailedWrite(e *entry, off int64) {
	j := e.j
	j.tail, j.alloc = off, off
	err := s.hookCut()
	if err == nil {
		err = j.f.Truncate(off)
	}
	if err == nil {
		err = fdatasync(j.f)
	}
	if err == nil {
		return
	}
	e.cut = &journalCut{gen: e.gen, size: off}
	s.log.Error("could not cut a failed write off a session's journal; the session serves its acknowledged state, and its next write cuts the journal first",
		zap.String("session", e.id), zap.String("journal", j.path), zap.Int64("acknowledged_bytes", off), zap.Error(err))
	s.closeJournalFile(e)
}

// finishCut makes the cut a failed write left pending, if any, before the
// next write: the journal file (open) is cut to its acknowledged length and
// fdatasynced. Caller holds e.wmu.
func (s *Store) finishCut(e *entry) error {
	c := e.cut
	if c == nil {
		return nil
	}
	if c.gen != e.gen {
		e.cut = nil // the session was rewritten since: that journal is gone
		return nil
	}
	j := e.j
	err := s.hookCut()
	if err == nil {
		err = j.f.Truncate(j.tail)
	}
	if err == nil {
		err = fdatasync(j.f)
	}
	if err != nil {
		return writeFailed(ioErr(fmt.Errorf("cut a failed write off the journal: %w", err)))
	}
	j.alloc = j.tail
	e.cut = nil
	s.log.Info("cut a failed write off a session's journal", zap.String("session", e.id), zap.Int64("acknowledged_bytes", j.tail))
	return nil
}

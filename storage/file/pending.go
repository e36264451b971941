package file

import (
	"errors"
	"fmt"
	"os"
)

// A session's commit frames reach its journal file after they are durable,
// not before: the WAL record of each frame is its durable copy, and the
// leader of the flush that made it durable adds the frame to the journal's
// pending bytes (journal.pending). They are written out with one pwrite
// per session, at the latest
//
//   - by the session's next write, once pendingMax bytes wait or the store
//     holds storePendingMax pending bytes in all;
//   - by a fold, before the journal is synced and listed as a segment;
//   - before the session's state leaves memory (cache eviction), since a
//     load reads the journal file;
//   - by the sealer, before it syncs the journals of a full log segment:
//     every frame of the segment is in its journal's pending bytes or file
//     by then, so the segment is retired only once the journals hold it
//     durably. Close seals the last segment the same way.
//
// So an append costs no journal write of its own, and a crash (kill -9 or
// power failure) loses only page cache the log's replay at Open writes
// back. A frame whose flush failed never reaches the file, so a failed
// write leaves nothing to cut off. A pending write that fails is retried
// by the next: the bytes it left are a prefix of the same pending bytes.
// Until then the session keeps its state in memory, the log segments
// holding the frames are kept, and the session's writes fail as any
// journal write failure does (storage.ErrNoSpace or
// storage.ErrUnavailable), with nothing acknowledged lost.
const (
	pendingMax      = 64 << 10
	storePendingMax = 16 << 20
)

// addPending queues frame, now durable in the log, for j's file. Caller
// is the flush's leader, while j's owner waits for the flush.
func (s *Store) addPending(j *journal, frame []byte) {
	j.mu.Lock()
	j.pending = append(j.pending, frame...)
	j.mu.Unlock()
	s.pendingBytes.Add(int64(len(frame)))
}

// pendingFull reports whether e's write should first write out its
// journal's pending bytes. Caller holds e.wmu.
func (s *Store) pendingFull(j *journal) bool {
	j.mu.Lock()
	n := len(j.pending)
	j.mu.Unlock()
	return n > 0 && (n >= pendingMax || s.pendingBytes.Load() >= storePendingMax)
}

// writePending writes e's journal's pending bytes into its file, which is
// open. Caller holds e.wmu.
func (s *Store) writePending(e *entry) error {
	j := e.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if ok, err := s.pendingToWrite(j); !ok {
		return err
	}
	if err := s.journalPut(j, j.written, j.pending); err != nil {
		return err
	}
	s.pendingDone(j, j.pending[:0])
	return nil
}

// pendingToWrite reports whether j has pending bytes to write, unless the
// test hook pending fails the write. Caller holds j.mu.
func (s *Store) pendingToWrite(j *journal) (bool, error) {
	if len(j.pending) == 0 {
		return false, nil
	}
	if err := s.hookPending(); err != nil {
		return false, ioErr(fmt.Errorf("write journal: %w", err))
	}
	return true, nil
}

// pendingDone records that j's pending bytes are in its file, keeping
// keep as the buffer for the next ones. Caller holds j.mu.
func (s *Store) pendingDone(j *journal, keep []byte) {
	j.written += int64(len(j.pending))
	s.pendingBytes.Add(-int64(len(j.pending)))
	j.pending = keep
}

// settleJournal writes e's journal's pending bytes into its file, before
// the session's state leaves memory: through its open file, or a
// descriptor of its own (a cache eviction must not wait for a journal
// slot). Caller holds e.wmu.
func (s *Store) settleJournal(e *entry) error {
	if e.j == nil {
		return nil
	}
	if e.j.f != nil {
		return s.writePending(e)
	}
	return s.writePendingPath(e.j)
}

// writePendingPath writes j's pending bytes through a descriptor of its
// own, without reserving space: the sealer's way, which never uses j.f (its
// owner may close it meanwhile). A journal whose file is gone belongs to a
// session since deleted or rewritten, whose pending bytes were discarded.
func (s *Store) writePendingPath(j *journal) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ok, err := s.pendingToWrite(j); !ok {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY, filePerm)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			s.pendingBytes.Add(-int64(len(j.pending)))
			j.pending = nil
			return nil
		}
		return ioErr(fmt.Errorf("open journal: %w", err))
	}
	n, err := f.WriteAt(j.pending, j.written)
	s.stats.bytesWritten.Add(int64(n))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ioErr(fmt.Errorf("write journal: %w", err))
	}
	j.alloc = max(j.alloc, j.written+int64(len(j.pending)))
	s.pendingDone(j, nil) // an idle session's buffer goes
	return nil
}

// discardPending drops j's pending bytes: its session was deleted, or
// rewritten into a snapshot that holds them.
func (s *Store) discardPending(j *journal) {
	if j == nil {
		return
	}
	j.mu.Lock()
	s.pendingBytes.Add(-int64(len(j.pending)))
	j.pending = nil
	j.mu.Unlock()
}

package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/storage"
)

var _ storage.StatsReporter = (*Store)(nil)

// diskUsageMaxAge is how long Stats reuses the data dir's measured size:
// measuring walks every file (two or three per session), too much work for
// every scrape of a large store.
const diskUsageMaxAge = 30 * time.Second

// readStats counts the reads of sessions' messages, for Stats.
type readStats struct {
	hits   atomic.Uint64 // answered from the in-memory view
	misses atomic.Uint64 // read from the session's files
}

// diskUsage is the data dir's size as last measured.
type diskUsage struct {
	mu    sync.Mutex // serialises measurements; guards bytes and at
	bytes int64
	at    time.Time
}

// Stats reports the store's state for monitoring: the sessions listed, the
// data dir's allocated size (measured at most every 30 s), the message
// cache, and the open journal files. Safe for concurrent use.
func (s *Store) Stats(ctx context.Context) (storage.Stats, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return storage.Stats{}, storage.ErrClosed
	}
	var sessions int64
	for _, n := range s.ns {
		sessions += int64(len(n.list))
	}
	s.mu.RUnlock()

	s.cacheMu.Lock()
	cached := s.cacheSize
	s.cacheMu.Unlock()

	s.jfiles.mu.Lock()
	journals := storage.JournalStats{Open: int64(s.jfiles.open), Max: int64(s.jfiles.max), Opens: uint64(s.jfiles.reopens)}
	s.jfiles.mu.Unlock()

	st := storage.Stats{
		Sessions: sessions,
		Cache: &storage.CacheStats{
			Bytes:    cached,
			MaxBytes: s.opts.cacheBytes,
			Hits:     s.reads.hits.Load(),
			Misses:   s.reads.misses.Load(),
		},
		Journals: &journals,
	}
	disk, err := s.diskBytes(ctx)
	st.DiskBytes = disk
	return st, err
}

// diskBytes returns the blocks allocated to the data dir's files, measuring
// again when the last measurement is older than diskUsageMaxAge.
func (s *Store) diskBytes(ctx context.Context) (int64, error) {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	if !s.disk.at.IsZero() && time.Since(s.disk.at) < diskUsageMaxAge {
		return s.disk.bytes, nil
	}
	var total int64
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a delete, a fold, a checkpoint)
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		total += allocated(fi)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("file: measure the data dir: %w", err)
	}
	s.disk.bytes, s.disk.at = total, time.Now()
	return total, nil
}

// allocated is the space fi takes on disk: its blocks where the system says
// (reserved journal space counts, holes do not), else its size.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

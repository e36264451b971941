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

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sessiond/sessiond/storage"
)

var _ storage.StatsReporter = (*Store)(nil)

// The data dir's size is measured by walking every file (two or three per
// session: seconds at 100,000 sessions on a busy machine), so never at
// every scrape: in the background, at most every diskUsageMinAge, or every
// diskUsageSpacing times the last walk's duration if that is longer (a walk
// then costs at most 1/diskUsageSpacing of the time), and a Stats call
// waits at most diskUsageWait for a walk in progress before answering the
// last value.
const (
	diskUsageMinAge  = 30 * time.Second
	diskUsageSpacing = 20
	diskUsageWait    = time.Second
)

// readStats counts the reads of sessions' messages, for Stats.
type readStats struct {
	hits   atomic.Uint64 // answered from the in-memory view
	misses atomic.Uint64 // read from the session's files
}

// diskUsage is the data dir's size as last measured.
type diskUsage struct {
	mu       sync.Mutex // guards the fields
	measured bool       // bytes holds a measurement
	bytes    int64
	at       time.Time     // when the last walk ended, successful or not
	took     time.Duration // how long the last walk took
	walking  chan struct{} // closed when the walk in progress ends; nil when none runs
}

// Stats reports the store's state for monitoring: the sessions listed, the
// data dir's allocated size (measured in the background; -1 until the
// first measurement ends), the message cache, the open journal files, the
// listing encodings and the write-ahead log segments started. The
// storage.Store refuses it once closed; it fails with nothing else. Safe for
// concurrent use.
func (s *Store) Stats(ctx context.Context) (storage.Stats, error) {
	s.mu.RLock()
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

	return storage.Stats{
		Sessions:  sessions,
		DiskBytes: s.diskBytes(ctx),
		Cache: &storage.CacheStats{
			Bytes:    cached,
			MaxBytes: s.opts.cacheBytes,
			Hits:     s.reads.hits.Load(),
			Misses:   s.reads.misses.Load(),
		},
		Journals: &journals,
		WAL: &storage.WALStats{
			Created:  uint64(s.stats.walCreated.Load()),
			Recycled: uint64(s.stats.walRecycled.Load()),
		},
	}, nil
}

// diskBytes returns the data dir's size as last measured (-1 if never),
// starting a new measurement when the last one is old enough and waiting
// up to diskUsageWait for the one in progress.
func (s *Store) diskBytes(ctx context.Context) int64 {
	d := &s.disk
	d.mu.Lock()
	if d.walking == nil && (d.at.IsZero() || time.Since(d.at) >= max(diskUsageMinAge, diskUsageSpacing*d.took)) {
		d.walking = make(chan struct{})
		go s.measureDisk(d.walking)
	}
	walking := d.walking
	d.mu.Unlock()
	if walking != nil {
		t := time.NewTimer(diskUsageWait)
		select {
		case <-walking:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.measured {
		return -1
	}
	return d.bytes
}

// measureDisk walks the data dir, records the result, and closes done. A
// failure keeps the last value and is logged at a bounded rate.
func (s *Store) measureDisk(done chan struct{}) {
	start := time.Now()
	total, err := s.walkDisk()
	d := &s.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at, d.took, d.walking = time.Now(), time.Since(start), nil
	close(done)
	switch {
	case err == nil:
		d.bytes, d.measured = total, true
	case !errors.Is(err, storage.ErrClosed):
		s.cond.Log(s.log, zapcore.WarnLevel, "disk usage", "could not measure the data dir's size; keeping the last measurement", zap.Error(err))
	}
}

// walkDisk returns the blocks allocated to the data dir's files. It gives
// up with ErrClosed soon after the store closes.
func (s *Store) walkDisk() (int64, error) {
	var total int64
	n := 0
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if n++; n%256 == 0 && s.closing() {
			return storage.ErrClosed
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a delete, a fold, a checkpoint)
			}
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
	return total, nil
}

// closing reports whether Close has begun.
func (s *Store) closing() bool {
	select {
	case <-s.ckptStop:
		return true
	default:
		return false
	}
}

// allocated is the space fi takes on disk: its blocks where the system says
// (reserved journal space counts, holes do not), else its size.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

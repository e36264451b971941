package storage

import (
	"context"
	"time"
)

// StatsReporter is implemented by a Driver that can describe its state for
// monitoring (the daemon's /metrics). Stats is safe for concurrent use and
// cheap enough to call at every scrape (every few seconds); it honours ctx.
// An error means Sessions and DiskBytes are unknown; the other fields are
// still filled in when the backend knows them, since they come from memory.
type StatsReporter interface {
	Stats(ctx context.Context) (Stats, error)
}

// Pinger is implemented by a Driver whose data lives behind a connection
// that can be lost (a database): Ping says whether it answers now,
// ErrUnavailable when it does not.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Stats is a backend's state at one moment, as plain numbers. A group a
// backend does not have stays nil.
type Stats struct {
	// Sessions is how many sessions the store holds, in every namespace.
	Sessions int64
	// DiskBytes is the space the store's data takes: the blocks allocated
	// to the file store's data dir (journal space reserved ahead included),
	// or the size of the database tables (indexes and TOAST included); -1
	// when not known yet.
	DiskBytes int64
	// Cache is the in-memory cache of sessions' messages, if any.
	Cache *CacheStats
	// Journals are the per-session journal files kept open, if any.
	Journals *JournalStats
	// Pool is the database connection pool, if any.
	Pool *PoolStats
	// WAL counts the file store's write-ahead log segments, if the backend
	// has such a log.
	WAL *WALStats
}

// WALStats counts the write-ahead log segments a file store started since
// it opened: in a new file, or in a spare (a retired segment's file, whose
// flushes overwrite written blocks and so sync data only). New files far
// above 3 per run mean spares are not being reused.
type WALStats struct {
	Created, Recycled uint64
}

// CacheStats describes a cache of sessions' messages in memory.
type CacheStats struct {
	// Bytes is what the cached messages count against the budget; MaxBytes
	// the budget.
	Bytes, MaxBytes int64
	// Hits counts reads of a session's messages answered from memory, and
	// Misses those that read the session from disk, since the store opened.
	Hits, Misses uint64
}

// JournalStats describes the journal files a store keeps open between
// writes.
type JournalStats struct {
	// Open is how many are open now; Max the bound.
	Open, Max int64
	// Opens counts journal files opened since the store opened: by a
	// session's first write, after a fold (a new journal), and again after
	// a close to stay under the bound. Opens far above the sessions written
	// and folded mean the bound is too low.
	Opens uint64
}

// PoolStats describes a database connection pool (pgxpool.Stat's
// numbers). Counters and durations are totals since the pool opened.
type PoolStats struct {
	MaxConns          int64
	TotalConns        int64 // open connections: acquired, idle and being opened
	AcquiredConns     int64
	IdleConns         int64
	ConstructingConns int64

	AcquireCount            uint64        // successful acquires
	AcquireDuration         time.Duration // time spent in successful acquires
	EmptyAcquireCount       uint64        // acquires that waited for a connection
	EmptyAcquireWait        time.Duration // time those waited
	CanceledAcquireCount    uint64        // acquires given up (context ended)
	NewConnsCount           uint64
	MaxLifetimeDestroyCount uint64
	MaxIdleDestroyCount     uint64
}

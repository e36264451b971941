package storage

import "time"

// FlushRecord describes one flush of a backend's write-ahead data to stable
// storage: one write and one fdatasync (or one commit) that made Appends
// appends durable together. It is metric-ready: a backend hands one to its
// flush observer per flush, so that the mean batch size (Appends per flush)
// and the flush latency can be exported without the observer knowing the
// backend's internals.
type FlushRecord struct {
	// Appends is how many acknowledged appends (AppendMessages calls) the
	// flush made durable; other writes that shared it (metadata updates)
	// are not counted.
	Appends int
	// Bytes is how many bytes the flush wrote.
	Bytes int64
	// Latency is how long the write and the sync took together.
	Latency time.Duration
}

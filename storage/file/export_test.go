package file

import "time"

// Options only tests set: production runs with the defaults openLocked
// gives.

// WithCheckpoints sets how often the metadata checkpoint is written: every
// interval while anything changed, and as soon as changed sessions were
// written to (or created) since the last one (defaults 30 s and 4,096).
func WithCheckpoints(interval time.Duration, changed int) Option {
	return func(o *options) {
		if interval > 0 {
			o.ckptInterval = interval
		}
		if changed > 0 {
			o.ckptDirty = changed
		}
	}
}

// WithFoldThreshold sets the journal size past which a session's journal is
// folded (default 4 MiB).
func WithFoldThreshold(bytes int64) Option { return func(o *options) { o.foldBytes = bytes } }

// WithWALSegmentBytes sets the WAL segment size (default walSegmentBytes).
func WithWALSegmentBytes(n int64) Option {
	return func(o *options) { o.walSegment = max(n, 4<<10) }
}

// withWALSpares sets how many retired segments are kept for reuse (default
// walMaxSpares); 0 turns recycling off, for benchmarks that compare.
func withWALSpares(n int) Option { return func(o *options) { o.walSpares = n } }

package postgres

import "context"

// PoolAcquires is how many connections d's pool has handed out: one per
// transaction, and one per statement run outside a transaction.
func PoolAcquires(d *Store) int64 { return d.pool.Stat().AcquireCount() }

// WatchedSessions is how many sessions d's watcher follows.
func WatchedSessions(d *Store) int {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return len(d.w.last)
}

// MovedSQL is the query a watch poll picks the sessions to catch up with,
// for plan tests.
const MovedSQL = movedSQL

// Poll runs one poll of d's watcher.
func Poll(ctx context.Context, d *Store) { d.w.sweep(ctx) }

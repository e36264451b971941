package postgres

import "context"

// PoolAcquires is how many connections d's pool has handed out: one per
// transaction, and one per statement run outside a transaction.
func PoolAcquires(d *Store) int64 { return d.pool.Stat().AcquireCount() }

// WatchedSessions is how many sessions d's watcher follows.
func WatchedSessions(d *Store) int {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return len(d.w.sessions)
}

// HoldWatcher stops d's watcher from reading new events until release is
// called, as a watcher that falls behind its writers would be: it holds
// the lock of every session the watcher follows, each once its catch-up
// under way has ended. Sessions followed after the call are not held.
func HoldWatcher(d *Store) (release func()) {
	w := d.w
	for {
		w.mu.Lock()
		held := make([]*watched, 0, len(w.sessions))
		for _, st := range w.sessions {
			held = append(held, st)
		}
		w.mu.Unlock()
		for _, st := range held {
			st.mu.Lock()
		}
		// None was forgotten (and perhaps followed again) meanwhile.
		kept := true
		for _, st := range held {
			kept = kept && !st.gone
		}
		unlock := func() {
			for _, st := range held {
				st.mu.Unlock()
			}
		}
		if kept {
			return unlock
		}
		unlock()
	}
}

// MovedSQL is the query a watch poll picks the sessions to catch up with,
// for plan tests.
const MovedSQL = movedSQL

// Poll runs one poll of d's watcher.
func Poll(ctx context.Context, d *Store) { d.w.sweep(ctx) }

// Subscribed is whether session id has a subscriber on d's replica.
func Subscribed(d *Store, id string) bool { return d.w.broker.Watched(id) }

// CatchUpDrain is how long a catch-up waits for its watchers to make room.
const CatchUpDrain = catchUpDrain

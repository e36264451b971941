package storage

import "errors"

// ErrUnavailable: the backend cannot serve the call now for a reason
// outside the request that may pass: its database is unreachable (a
// networked backend), or the process has no file descriptor left or the
// data dir's filesystem turned read-only (the file backend). A write that fails so almost always changed nothing,
// but a connection lost during the commit leaves it unknown: retry it, which
// idempotent writes (appends with message ids, creates with an id) make
// safe. Servers answer it UNAVAILABLE.
var ErrUnavailable = errors.New("storage unavailable")

// SubscribeReplay is Subscribe for a backend that keeps watch history
// itself (in its database, shared by replicas): the subscription receives
// replay first (the events after the watcher's from_revision, in order, at
// most WatchHistory of them), then what Publish delivers. The backend calls
// it under the same serialisation as its Publish calls for the session, so
// that no event falls between replay and the live ones.
func (b *Broker) SubscribeReplay(sessionID string, replay []Event) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if len(replay) > WatchBuffer {
		replay = replay[len(replay)-WatchBuffer:]
	}
	s := &Subscription{broker: b, sessionID: sessionID, ch: make(chan Event, WatchBuffer)}
	for _, ev := range replay {
		s.ch <- ev
	}
	if b.subs[sessionID] == nil {
		b.subs[sessionID] = make(map[*Subscription]struct{})
	}
	b.subs[sessionID][s] = struct{}{}
	return s, nil
}

// Reset ends every subscription to sessionID with err (which should wrap
// ErrWatchReset): the backend can no longer tell those watchers every
// change, for instance because the history they still need was trimmed.
func (b *Broker) Reset(sessionID string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs[sessionID] {
		b.endLocked(s, err)
	}
}

// Watched reports whether sessionID has a subscriber.
func (b *Broker) Watched(sessionID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs[sessionID]) > 0
}

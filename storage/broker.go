package storage

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
)

// Broker sizes. A watcher that has WatchBuffer events not yet taken is cut off
// with ErrWatchReset rather than ever blocking a writer.
const (
	WatchBuffer  = 256
	WatchHistory = 64 // events kept per watched session, for resuming watches
	// WatchHistoryBytes bounds the encoded messages a watched session's
	// history holds, so that a few huge appends cannot pin much memory.
	WatchHistoryBytes = 8 << 20
)

// Broker fans a backend's change events out to subscriptions. Backends call
// Publish once for every revision bump, in revision order per session (for
// instance under the session's write lock), and call Subscribe under the same
// lock so that no event falls between the revision read and the subscription.
//
// History (for resuming with a fromRevision in the past) is kept only for
// sessions that have had a subscriber since the broker started, at most
// WatchHistory events and WatchHistoryBytes of messages each, so unwatched
// sessions cost nothing.
type Broker struct {
	mu      sync.Mutex // guards everything below
	subs    map[string]map[*Subscription]struct{}
	history map[string]*history
	closed  bool
}

// history is what a watched session keeps for resuming watches.
type history struct {
	events []Event
	sizes  []int // encoded size of each event's messages
	bytes  int   // sum of sizes
}

// NewBroker returns an empty broker.
func NewBroker() *Broker {
	return &Broker{
		subs:    make(map[string]map[*Subscription]struct{}),
		history: make(map[string]*history),
	}
}

// Subscription receives a session's events until it ends: Events is closed
// after the last one, and Err then says why (nil after EventDeleted or Close;
// ErrWatchReset when the subscriber fell behind; ErrClosed when the store
// closed).
type Subscription struct {
	broker    *Broker
	sessionID string
	ch        chan Event
	once      sync.Once
	err       error // set before ch is closed
}

// Events returns the channel of events, closed when the subscription ends.
// An Event (its Session and Messages) is shared with every other subscriber
// of the session and with the replay history: treat it as read-only.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Err says why the subscription ended; valid once Events is closed.
func (s *Subscription) Err() error { return s.err }

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	s.broker.endLocked(s, nil)
}

// Subscribe starts a subscription to sessionID, whose revision is current,
// for events after from (0 means from now). It replays kept history between
// from and current; ErrWatchReset if from is newer than current or older than
// the history kept.
func (b *Broker) Subscribe(sessionID string, current, from uint64) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if from == 0 {
		from = current
	}
	if from > current {
		return nil, fmt.Errorf("from_revision %d is newer than the session's revision %d: %w", from, current, ErrWatchReset)
	}
	var replay []Event
	if from < current {
		var hist []Event
		if h := b.history[sessionID]; h != nil {
			hist = h.events
		}
		if len(hist) == 0 || hist[0].Revision > from+1 || hist[len(hist)-1].Revision != current {
			return nil, fmt.Errorf("from_revision %d is older than the history kept: %w", from, ErrWatchReset)
		}
		for _, ev := range hist {
			if ev.Revision > from {
				replay = append(replay, ev)
			}
		}
	}
	s := &Subscription{broker: b, sessionID: sessionID, ch: make(chan Event, WatchBuffer)}
	for _, ev := range replay {
		s.ch <- ev // fits: WatchHistory < WatchBuffer
	}
	if b.subs[sessionID] == nil {
		b.subs[sessionID] = make(map[*Subscription]struct{})
	}
	b.subs[sessionID][s] = struct{}{}
	if _, ok := b.history[sessionID]; !ok {
		b.history[sessionID] = &history{}
	}
	return s, nil
}

// Publish delivers ev to sessionID's subscribers and keeps it in the
// session's history if the session is watched. An EventDeleted ends every
// subscription to the session and forgets its history.
func (b *Broker) Publish(sessionID string, ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if h := b.history[sessionID]; h != nil && ev.Type != EventDeleted {
		h.add(ev)
	}
	for s := range b.subs[sessionID] {
		select {
		case s.ch <- ev:
			if ev.Type == EventDeleted {
				b.endLocked(s, nil)
			}
		default:
			b.endLocked(s, fmt.Errorf("watcher fell %d events behind: %w", WatchBuffer, ErrWatchReset))
		}
	}
	if ev.Type == EventDeleted {
		delete(b.history, sessionID)
	}
}

// Close ends every subscription with ErrClosed.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, set := range b.subs {
		for s := range set {
			b.endLocked(s, ErrClosed)
		}
	}
}

// add keeps ev, dropping the oldest events beyond WatchHistory or
// WatchHistoryBytes (the newest is always kept).
func (h *history) add(ev Event) {
	size := 0
	for _, m := range ev.Messages {
		size += proto.Size(m)
	}
	h.events, h.sizes, h.bytes = append(h.events, ev), append(h.sizes, size), h.bytes+size
	drop := 0
	for len(h.events)-drop > WatchHistory || (h.bytes > WatchHistoryBytes && drop < len(h.events)-1) {
		h.bytes -= h.sizes[drop]
		drop++
	}
	if drop > 0 {
		// Copy rather than reslice, so that dropped events are freed.
		h.events = append(h.events[:0:0], h.events[drop:]...)
		h.sizes = append(h.sizes[:0:0], h.sizes[drop:]...)
	}
}

func (b *Broker) endLocked(s *Subscription, err error) {
	s.once.Do(func() {
		s.err = err
		close(s.ch)
		set := b.subs[s.sessionID]
		delete(set, s)
		if len(set) == 0 {
			delete(b.subs, s.sessionID)
		}
	})
}

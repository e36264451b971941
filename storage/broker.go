package storage

import (
	"container/list"
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
	// DefaultWatchHistoryTotal bounds the history of every session together
	// unless WithHistoryTotal says otherwise.
	DefaultWatchHistoryTotal = 64 << 20

	// Fixed costs counted against the daemon-wide budget besides message
	// bytes: a session's history entry, and each kept event.
	historyEntryCost = 256
	historyEventCost = 128
)

// Broker fans a backend's change events out to subscriptions. Backends call
// Publish once for every revision bump, in revision order per session (for
// instance under the session's write lock), and call Subscribe under the same
// lock so that no event falls between the revision read and the subscription.
//
// History (for resuming with a fromRevision in the past) is kept only for
// sessions that have had a subscriber, or a Subscribe refused for want of
// history (its watcher reloads and comes back), since the broker started:
// at most WatchHistory events and WatchHistoryBytes of messages each, so
// sessions never watched cost nothing. All histories together stay within a
// daemon-wide budget (WithHistoryTotal): past it, the histories of the
// least recently used sessions without a subscriber go first, then the
// oldest events of watched ones. A watch that resumes from a revision whose
// history was released gets ErrWatchReset (OUT_OF_RANGE: reload, then watch
// from the current revision), as the contract allows.
type Broker struct {
	mu       sync.Mutex // guards everything below
	subs     map[string]map[*Subscription]struct{}
	history  map[string]*history
	lru      *list.List // of *history, most recently used first
	total    int64      // cost of every history: the sum of their cost
	maxTotal int64
	closed   bool
}

// history is what a watched session keeps for resuming watches.
type history struct {
	id     string
	elem   *list.Element // in Broker.lru
	events []Event
	sizes  []int64 // cost of each event: its messages and metadata
	cost   int64   // historyEntryCost plus the sum of sizes
}

// BrokerOption tunes a Broker.
type BrokerOption func(*Broker)

// WithHistoryTotal bounds, in bytes, the history all sessions keep together
// (default DefaultWatchHistoryTotal; values below WatchHistoryBytes count as
// WatchHistoryBytes, so the newest event of a session always fits).
func WithHistoryTotal(bytes int64) BrokerOption {
	return func(b *Broker) { b.maxTotal = max(bytes, WatchHistoryBytes) }
}

// NewBroker returns an empty broker.
func NewBroker(opts ...BrokerOption) *Broker {
	b := &Broker{
		subs:     make(map[string]map[*Subscription]struct{}),
		history:  make(map[string]*history),
		lru:      list.New(),
		maxTotal: DefaultWatchHistoryTotal,
	}
	for _, o := range opts {
		o(b)
	}
	return b
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
	err       error      // set before ch is closed
	backlog   func() int // SetBacklog's; guarded by broker.mu
}

// Events returns the channel of events, closed when the subscription ends.
// An Event (its Session and Messages) is shared with every other subscriber
// of the session and with the replay history: treat it as read-only.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Err says why the subscription ended; valid once Events is closed.
func (s *Subscription) Err() error { return s.err }

// SetBacklog gives the subscription's reader a queue of its own: backlog
// says how many events taken from Events it has yet to deliver. Room
// counts them, so that a backend publishing a backlog in pages waits for
// the reader to deliver them, not only to take them.
func (s *Subscription) SetBacklog(backlog func() int) {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	s.backlog = backlog
}

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
	h := b.history[sessionID]
	if from < current {
		var hist []Event
		if h != nil {
			hist = h.events
		}
		if len(hist) == 0 || hist[0].Revision > from+1 || hist[len(hist)-1].Revision != current {
			// The watcher will reload and watch again: keep history from
			// now on, so that a write landing between its reload and its
			// next Subscribe is replayed instead of failing it again.
			b.keepHistoryLocked(sessionID, h)
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
	b.keepHistoryLocked(sessionID, h)
	return s, nil
}

// keepHistoryLocked marks sessionID as watched: its history h, or a new
// empty one when h is nil, becomes the most recently used.
func (b *Broker) keepHistoryLocked(sessionID string, h *history) {
	if h != nil {
		b.lru.MoveToFront(h.elem)
		return
	}
	h = &history{id: sessionID, cost: historyEntryCost}
	h.elem = b.lru.PushFront(h)
	b.history[sessionID] = h
	b.total += h.cost
	b.trimLocked(h)
}

// Room is how many events every subscriber of sessionID can still take
// without being cut off, less what its reader has taken and not yet
// delivered (SetBacklog); WatchBuffer when it has none. A backend that
// publishes a backlog in pages sizes them by it.
func (b *Broker) Room(sessionID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := WatchBuffer
	for s := range b.subs[sessionID] {
		free := cap(s.ch) - len(s.ch)
		if s.backlog != nil {
			free -= s.backlog()
		}
		room = min(room, free)
	}
	return max(room, 0)
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
	b.publishLocked(sessionID, ev)
}

func (b *Broker) publishLocked(sessionID string, ev Event) {
	if h := b.history[sessionID]; h != nil && ev.Type != EventDeleted {
		b.total += h.add(ev)
		b.lru.MoveToFront(h.elem)
		b.trimLocked(h)
	}
	// The subscribers' copies share one encoding; the history's copy,
	// kept for rare replays, holds none, so that it costs what it counts.
	if len(b.subs[sessionID]) > 0 {
		ev.encoding = new(sharedEncoding)
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
	if h := b.history[sessionID]; h != nil && ev.Type == EventDeleted {
		b.forgetLocked(h)
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
// WatchHistoryBytes (the newest is always kept). It returns how much h's
// cost changed.
func (h *history) add(ev Event) int64 {
	before := h.cost
	size := int64(historyEventCost) + metaSize(ev.Session)
	for _, m := range ev.Messages {
		size += int64(proto.Size(m))
	}
	if ev.Delta != nil {
		size += int64(proto.Size(ev.Delta))
	}
	h.events, h.sizes, h.cost = append(h.events, ev), append(h.sizes, size), h.cost+size
	drop, kept := 0, h.cost-historyEntryCost
	for len(h.events)-drop > WatchHistory || (kept > WatchHistoryBytes && drop < len(h.events)-1) {
		kept -= h.sizes[drop]
		drop++
	}
	h.dropOldest(drop)
	return h.cost - before
}

// dropOldest forgets the n oldest events. It zeroes them, so that they
// are freed, and reslices: the next append that finds no room copies
// the kept events to a new array, once per about WatchHistory events
// rather than at every event of a watched session.
func (h *history) dropOldest(n int) {
	if n == 0 {
		return
	}
	for _, sz := range h.sizes[:n] {
		h.cost -= sz
	}
	clear(h.events[:n])
	h.events, h.sizes = h.events[n:], h.sizes[n:]
}

// trimLocked brings the histories back within maxTotal. It releases the
// least recently used sessions without a subscriber first (their whole
// entry), then the oldest events of watched sessions, least recently used
// first; keep (the session just changed) goes last and keeps its newest
// event.
func (b *Broker) trimLocked(keep *history) {
	if b.total <= b.maxTotal {
		return
	}
	for e := b.lru.Back(); e != nil && b.total > b.maxTotal; {
		h := e.Value.(*history)
		e = e.Prev()
		if h != keep && len(b.subs[h.id]) == 0 {
			b.forgetLocked(h)
		}
	}
	for e := b.lru.Back(); e != nil && b.total > b.maxTotal; e = e.Prev() {
		h := e.Value.(*history)
		n := len(h.events)
		if h == keep {
			n-- // its newest event stays, as in the per-session bound
		}
		drop, excess := 0, b.total-b.maxTotal
		for ; drop < n && excess > 0; drop++ {
			excess -= h.sizes[drop]
		}
		before := h.cost
		h.dropOldest(drop)
		b.total -= before - h.cost
	}
}

// forgetLocked releases h entirely.
func (b *Broker) forgetLocked(h *history) {
	b.total -= h.cost
	b.lru.Remove(h.elem)
	delete(b.history, h.id)
}

// metaSize estimates what a session's metadata costs in memory.
func metaSize(s *Session) int64 {
	if s == nil {
		return 0
	}
	n := int64(256 + len(s.ID) + len(s.Namespace) + len(s.Alias) + len(s.Title) + len(s.Summary))
	for k, v := range s.Metadata {
		n += int64(32 + len(k) + len(v))
	}
	for k, v := range s.Labels {
		n += int64(32 + len(k) + len(v))
	}
	return n
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

// PublishBuilt is Publish for an event that costs something to build (a
// copy of the session's metadata): build runs only when the session has a
// subscriber or keeps history, so appends to sessions nobody watches copy
// nothing. It runs under the broker's lock, as Subscribe does, so a watcher
// subscribed before the call never misses the event.
func (b *Broker) PublishBuilt(sessionID string, build func() Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || (b.history[sessionID] == nil && len(b.subs[sessionID]) == 0) {
		return
	}
	b.publishLocked(sessionID, build())
}

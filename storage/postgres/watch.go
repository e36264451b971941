package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// watcher delivers the events of watched sessions, whichever replica made
// them. Every write stores its event, as an events row or (an append that
// changes only the revision, count and update time) on its messages, and
// once committed NOTIFYs sessiond_events with the session's id and new
// revision. One LISTEN connection per Store wakes the watcher, which reads
// the events after the last revision it delivered: the rows are the truth,
// so a notification lost to a dropped connection loses nothing (the
// watcher sweeps every watched session after reconnecting and every poll
// interval).
//
// Each session is caught up on a goroutine of its own, under its own lock
// (watched.mu): a catch-up may wait up to catchUpDrain for a slow watcher
// of its session, and no other session's events, nor a new Watch of
// another session, wait for it.
type watcher struct {
	s      *Store
	cfg    *pgx.ConnConfig
	poll   time.Duration
	broker *storage.Broker
	ctx    context.Context // the LISTEN loop's and the catch-ups'; ends at close
	cancel context.CancelFunc
	done   chan struct{} // closed when the LISTEN loop ends

	// catchUps counts the catch-ups running on goroutines of their own.
	catchUps sync.WaitGroup
	// reads holds a token for each catch-up reading events (read).
	reads chan struct{}

	// mu guards sessions, every watched's running and again, started and
	// closed. It is held only to look them up or change them, never
	// through a statement or a wait; it may be taken while holding a
	// watched's mu, never the other way round.
	mu       sync.Mutex
	sessions map[string]*watched // by session id
	started  bool
	closed   bool
}

// watched is a session the watcher follows. There is at most one per
// session in watcher.sessions, and it leaves only under its mu (forget),
// whose holder then publishes nothing more: so the session's events are
// published by one holder of one lock at a time.
type watched struct {
	id string

	// mu serialises the session's catch-ups and new subscriptions, so
	// that its events reach the broker once and in revision order, and no
	// event falls between a new subscriber's replay and its live events.
	// A catch-up holds it through its reads and its waits for room.
	mu sync.Mutex
	// last is the last revision published: 0 until the first Watch has
	// read the session's revision (the poll passes the session over
	// meanwhile, and a notification's catch-up waits for mu, which that
	// Watch holds). Written under mu; read without it, by the LISTEN loop
	// and the poll, to tell whether the session may have moved: a stale
	// value costs a catch-up that finds nothing.
	last  atomic.Uint64
	count int64 // the session's message count at last; under mu
	gone  bool  // forgotten: no longer in watcher.sessions; under mu

	// Under watcher.mu: a catch-up goroutine is running for the session;
	// and a notification or a poll found it moved since that goroutine
	// began its pass, which it then makes once more.
	running, again bool
}

func newWatcher(s *Store, cfg *pgx.ConnConfig, poll time.Duration) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &watcher{s: s, cfg: cfg, poll: poll, broker: storage.NewBroker(), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		reads: make(chan struct{}, max(1, s.pool.Config().MaxConns/4)), sessions: map[string]*watched{}}
}

// Watch subscribes to a session's changes after fromRevision.
func (s *Store) Watch(ctx context.Context, ref storage.Ref, fromRevision uint64) (*storage.Subscription, error) {
	id := ref.ID
	for {
		if id == "" { // an alias: the session's id first
			cur, err := s.Get(ctx, ref)
			if err != nil {
				return nil, err
			}
			id = cur.ID
		}
		st := s.w.follow(id)
		st.mu.Lock()
		sub, retry, err := s.w.subscribe(ctx, st, ref, fromRevision)
		st.mu.Unlock()
		if retry == "" {
			return sub, err
		}
		id = retry
	}
}

// follow returns session id's watched, a new one (last 0) if it has none.
func (w *watcher) follow(id string) *watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.sessions[id]
	if st == nil {
		st = &watched{id: id}
		w.sessions[id] = st
	}
	return st
}

// subscribe is Watch on st, whose mu is held. When st is not (or no
// longer) the session's, forgotten meanwhile or named by another spelling
// of its id, it returns the session's id as retry: Watch starts over.
func (w *watcher) subscribe(ctx context.Context, st *watched, ref storage.Ref, fromRevision uint64) (sub *storage.Subscription, retry string, err error) {
	if st.gone {
		return nil, st.id, nil
	}
	defer func() {
		if sub == nil && !w.broker.Watched(st.id) {
			w.forget(st)
		}
	}()
	cur, err := w.s.Get(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	if cur.ID != st.id {
		return nil, cur.ID, nil
	}
	rev, count := cur.Revision, cur.MessageCount
	if st.last.Load() != 0 {
		// Deliver what the current subscribers have not had yet, so the
		// new one starts where they are.
		if err := w.catchUpLocked(ctx, st); err != nil {
			return nil, "", err
		}
		if st.gone { // reset or deleted during the catch-up: read it afresh
			return nil, st.id, nil
		}
		rev, count = st.last.Load(), st.count
	}
	// Otherwise the session was not followed: from its revision now. st
	// was in w.sessions before the Get began, so a write committed after
	// the Get's snapshot, whose notification comes after, has a catch-up
	// scheduled, which waits for st.mu and starts from rev.
	from := fromRevision
	if from == 0 {
		from = rev
	}
	if from > rev {
		return nil, "", fmt.Errorf("from_revision %d is newer than the session's revision %d: %w", from, rev, storage.ErrWatchReset)
	}
	tooOld := fmt.Errorf("from_revision %d is older than the history kept (the last %d revisions): %w", from, historyEvents, storage.ErrWatchReset)
	if rev-from > historyEvents {
		return nil, "", tooOld
	}
	var replay []storage.Event
	if from < rev {
		if replay, _, err = w.s.events(ctx, st.id, from, -1, rev); err != nil {
			return nil, "", err
		}
		if uint64(len(replay)) != rev-from || replay[0].Revision != from+1 {
			return nil, "", tooOld
		}
	}
	if sub, err = w.broker.SubscribeReplay(st.id, replay); err != nil {
		return nil, "", err
	}
	st.last.Store(rev)
	st.count = count
	w.start()
	return sub, "", nil
}

// events reads session id's events after revision from, up to to (0:
// all), in order, in one snapshot. fromCount is the session's message
// count at revision from (-1: not known). A revision it cannot read (its
// history trimmed) is missing from the answer: the callers find the gap,
// after the first event read, or, when none is, by gone: the session
// moved past from all the same (or was deleted), its revisions up to to
// trimmed.
func (s *Store) events(ctx context.Context, id string, from uint64, fromCount int64, to uint64) (evs []storage.Event, gone bool, err error) {
	err = s.withSnapshot(ctx, func(tx pgx.Tx) error {
		stored, err := readEvents(ctx, tx, id, from, fromCount, to)
		if err != nil {
			return err
		}
		for _, ev := range stored {
			evs = append(evs, ev.Event)
		}
		if len(evs) > 0 {
			return nil
		}
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND revision > $2)
			OR EXISTS (SELECT 1 FROM events WHERE session_id = $1 AND revision > $2)`, id, int64(from)).Scan(&gone)
	})
	return evs, gone, err
}

// storedEvent is an event as stored: an events row, or an append read
// from its messages.
type storedEvent struct {
	storage.Event
	derived bool     // read from its messages, which have no events row
	first   int64    // derived: the position of its first message
	bodies  [][]byte // derived: its messages' encodings
}

// readEvents reads session id's events after revision from, up to to (0:
// all), in order, as events does, through q (one snapshot, or a write
// transaction holding the session's row lock).
//
// A revision with an events row is read from it. Every other revision is
// an append that wrote no row (appendFastSQL): its messages carry the
// revision and updated_ns, and the rest of its session is that of the
// newest row before it, which an append of that kind leaves unchanged. So
// the rows are read from the newest one at or before from, and the
// messages from the lowest position such an append can have written: the
// message count at from, or after any row in the range (a rewind lowers
// it; an append only raises it).
func readEvents(ctx context.Context, q querier, id string, from uint64, fromCount int64, to uint64) ([]storedEvent, error) {
	upper := int64(to)
	if to == 0 {
		upper = 1<<63 - 1
	}
	rows, err := q.Query(ctx, `SELECT e.revision, e.type, e.session, e.count,
			CASE WHEN e.type = $4 AND e.revision > $2 THEN `+eventBodies+` ELSE e.messages END,
			coalesce(e.namespace, ''), coalesce(e.alias, ''), coalesce(e.created_ns, 0), coalesce(e.updated_ns, 0),
			coalesce(e.message_count, 0), e.meta, e.tally, e.expire_after_ns, coalesce(e.open_message_id, ''), e.delta
		FROM events e WHERE e.session_id = $1 AND e.revision <= $3
			AND e.revision >= coalesce((SELECT max(b.revision) FROM events b WHERE b.session_id = $1 AND b.revision <= $2), 0)
		ORDER BY e.revision`,
		id, int64(from), upper, int16(storage.EventAppended))
	if err != nil {
		return nil, err
	}
	var (
		rowEvents    []storage.Event
		rev          int64
		typ          int16
		count        int32
		snap         []byte
		bodies       [][]byte
		m            storage.Session
		created, upd int64
		meta, tally  []byte
		expire       int64
		open         string
		delta        []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&rev, &typ, &snap, &count, &bodies, &m.Namespace, &m.Alias, &created, &upd, &m.MessageCount, &meta, &tally, &expire,
		&open, &delta}, func() error {
		ev := storage.Event{Type: storage.EventType(typ), Revision: uint64(rev), Session: &storage.Session{}}
		m.Tally, m.ExpireAfter = storage.Tally{}, time.Duration(expire)
		if err := decodeTally(tally, &m); err != nil {
			return fmt.Errorf("postgres: event %d of session %s: tally: %v: %w", rev, id, err, storage.ErrDataLoss)
		}
		m.OpenMessageID = open
		if err := eventSession(ev.Session, id, rev, snap, m, created, upd, meta); err != nil {
			return fmt.Errorf("postgres: event %d of session %s does not decode: %v: %w", rev, id, err, storage.ErrDataLoss)
		}
		if ev.Revision <= from { // the state the appends after it start from
			rowEvents = append(rowEvents, ev)
			return nil
		}
		if ev.Type == storage.EventAppended && len(bodies) != int(count) {
			return fmt.Errorf("postgres: event %d of session %s appended %d messages but %d are stored: %w", rev, id, count, len(bodies), storage.ErrDataLoss)
		}
		switch ev.Type {
		case storage.EventAppended, storage.EventFinished:
			var err error
			if ev.Messages, err = decodeAll(id, bodies); err != nil {
				return err
			}
		case storage.EventDelta:
			ev.Delta = new(sessiondv1.MessageDelta)
			if err := proto.Unmarshal(delta, ev.Delta); err != nil {
				return fmt.Errorf("postgres: the delta of event %d of session %s does not decode: %v: %w", rev, id, err, storage.ErrDataLoss)
			}
		}
		rowEvents = append(rowEvents, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	lowest, err := countAt(ctx, q, id, from, fromCount, rowEvents)
	if err != nil {
		return nil, err
	}
	for _, ev := range rowEvents {
		if ev.Revision > from {
			lowest = min(lowest, ev.Session.MessageCount)
		}
	}
	derived, err := readAppends(ctx, q, id, from, lowest, upper)
	if err != nil {
		return nil, err
	}
	return mergeEvents(id, from, rowEvents, derived)
}

// countAt returns a lower bound of session id's message count at
// revision from: fromCount when known, else one past the last message
// an append up to from wrote without a row (the plain appends after from
// come after it), looked for from the end down to the count of the
// newest row at or before from (rowEvents' first), where the count can
// only have grown since.
func countAt(ctx context.Context, q querier, id string, from uint64, fromCount int64, rowEvents []storage.Event) (int64, error) {
	if fromCount >= 0 {
		return fromCount, nil
	}
	var base int64
	if len(rowEvents) > 0 && rowEvents[0].Revision <= from {
		base = rowEvents[0].Session.MessageCount
	}
	rows, err := q.Query(ctx, `SELECT coalesce((SELECT pos + 1 FROM messages
		WHERE session_id = $1 AND pos >= $2 AND revision <= $3 ORDER BY pos DESC LIMIT 1), $2)`, id, base, int64(from))
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
}

// readAppends reads the messages of session id from position lowest on
// that appends after revision from, up to upper, wrote without an events
// row: one storedEvent per revision, its Session not yet set.
func readAppends(ctx context.Context, q querier, id string, from uint64, lowest, upper int64) ([]storedEvent, error) {
	rows, err := q.Query(ctx, `SELECT pos, revision, updated_ns, body FROM messages
		WHERE session_id = $1 AND pos >= $2 AND revision > $3 AND revision <= $4 ORDER BY pos`,
		id, lowest, int64(from), upper)
	if err != nil {
		return nil, err
	}
	var (
		out           []storedEvent
		pos, rev, upd int64
		body          []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&pos, &rev, &upd, &body}, func() error {
		if n := len(out); n > 0 && out[n-1].Revision == uint64(rev) {
			out[n-1].bodies = append(out[n-1].bodies, body)
			return nil
		}
		out = append(out, storedEvent{
			Event:   storage.Event{Type: storage.EventAppended, Revision: uint64(rev), Session: &storage.Session{UpdatedAt: time.Unix(0, upd).UTC()}},
			derived: true, first: pos, bodies: [][]byte{body},
		})
		return nil
	})
	return out, err
}

// mergeEvents puts the events rows (the first may be the state at from)
// and the appends read from messages in revision order, giving each append
// its session: the newest row's before it, with the append's revision,
// message count and updated_ns. An append with no row before it (history
// trimmed) is left out. A revision with both (an append a rewrite copied
// into a row) is read from its row.
func mergeEvents(id string, from uint64, rowEvents []storage.Event, derived []storedEvent) ([]storedEvent, error) {
	out := make([]storedEvent, 0, len(rowEvents)+len(derived))
	var base *storage.Session
	i := 0
	for _, d := range derived {
		for ; i < len(rowEvents) && rowEvents[i].Revision <= d.Revision; i++ {
			base = rowEvents[i].Session
			if rowEvents[i].Revision > from {
				out = append(out, storedEvent{Event: rowEvents[i]})
			}
		}
		if base == nil || (len(out) > 0 && out[len(out)-1].Revision == d.Revision) {
			continue
		}
		sess := *base
		sess.ID, sess.Revision, sess.UpdatedAt = id, d.Revision, d.Session.UpdatedAt
		sess.MessageCount = d.first + int64(len(d.bodies))
		d.Session = &sess
		var err error
		if d.Messages, err = decodeAll(id, d.bodies); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	for ; i < len(rowEvents); i++ {
		if rowEvents[i].Revision > from {
			out = append(out, storedEvent{Event: rowEvents[i]})
		}
	}
	return out, nil
}

// eventSession fills out with an event's session after the change: from
// its columns, or from the JSON that rows written by schema version 1 hold
// (snap) instead.
func eventSession(out *storage.Session, id string, rev int64, snap []byte, cols storage.Session, created, upd int64, meta []byte) error {
	if snap != nil {
		return json.Unmarshal(snap, out)
	}
	*out = cols
	out.ID, out.Revision = id, uint64(rev)
	out.CreatedAt, out.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, upd).UTC()
	return decodeMeta(meta, out)
}

// catchUpDrain bounds how long one catch-up waits for its watchers to
// take the events it published before it reads the next page. Past it, a
// page fills the buffers again and cuts off a watcher that has not made
// room, as a file store watcher is cut off by a writer. Only its own
// session waits for it: other sessions' catch-ups run on goroutines of
// their own.
const catchUpDrain = 2 * time.Second

// catchUpLocked publishes session st's events after the last one
// published, a page at a time: at most what every subscriber has room
// for, waiting (up to catchUpDrain in all) for half a buffer of room, so
// that a backlog of many revisions (a replica slow to read a burst of
// deltas) reaches a watcher that reads it instead of cutting it off. A
// gap (history trimmed past what the watchers have) resets them; a
// deletion ends them. st.mu is held.
func (w *watcher) catchUpLocked(ctx context.Context, st *watched) error {
	drained := time.Now().Add(catchUpDrain)
	for !st.gone {
		if !w.broker.Watched(st.id) {
			w.forget(st)
			return nil
		}
		last, page := st.last.Load(), uint64(w.room(ctx, st.id, drained))
		evs, gone, err := w.read(ctx, st.id, last, st.count, last+page)
		if err != nil {
			return err
		}
		if gone {
			w.broker.Reset(st.id, fmt.Errorf("the watcher missed the revisions after %d, no longer kept: %w", last, storage.ErrWatchReset))
			w.forget(st)
			return nil
		}
		count := st.count
		for _, ev := range evs {
			if ev.Revision != last+1 {
				w.broker.Reset(st.id, fmt.Errorf("the watcher missed revisions %d to %d, no longer kept: %w", last+1, ev.Revision-1, storage.ErrWatchReset))
				w.forget(st)
				return nil
			}
			w.broker.Publish(st.id, ev)
			last, count = ev.Revision, ev.Session.MessageCount
			if ev.Type == storage.EventDeleted {
				w.forget(st)
				return nil
			}
		}
		st.last.Store(last)
		st.count = count
		if uint64(len(evs)) < page {
			return nil
		}
	}
	return nil
}

// read is events for a catch-up, a quarter of the pool's connections at
// most at a time, so that a burst of catch-ups (every watched session
// moved, found by the poll after a reconnection) leaves the rest to the
// replica's calls. It is not held through a wait for room.
func (w *watcher) read(ctx context.Context, id string, from uint64, fromCount int64, to uint64) ([]storage.Event, bool, error) {
	select {
	case w.reads <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	defer func() { <-w.reads }()
	return w.s.events(ctx, id, from, fromCount, to)
}

// room returns how many events every subscriber of id can take, once it
// is at least half a buffer; WatchBuffer once drained has passed (or ctx
// ended), whatever they took.
func (w *watcher) room(ctx context.Context, id string, drained time.Time) int {
	for {
		if room := w.broker.Room(id); room >= storage.WatchBuffer/2 {
			return room
		}
		if !time.Now().Before(drained) || ctx.Err() != nil {
			return storage.WatchBuffer
		}
		sleep(ctx, time.Millisecond)
	}
}

// forget stops following session st; st.mu is held.
func (w *watcher) forget(st *watched) {
	if st.gone {
		return
	}
	st.gone = true
	w.mu.Lock()
	delete(w.sessions, st.id)
	w.mu.Unlock()
}

// scheduleLocked has session st caught up on a goroutine of its own, or,
// when one runs already, makes it pass once more, which reads whatever
// came meanwhile: at most one runs per session, and a burst of
// notifications costs two passes at most. w.mu is held.
func (w *watcher) scheduleLocked(st *watched) {
	if w.closed {
		return
	}
	if st.running {
		st.again = true
		return
	}
	st.running = true
	w.catchUps.Add(1)
	go func() {
		defer w.catchUps.Done()
		for again := true; again; {
			w.catchUp(st)
			w.mu.Lock()
			again, st.again = st.again, false
			st.running = again
			w.mu.Unlock()
		}
	}()
}

// catchUp publishes the new events of session st.
func (w *watcher) catchUp(st *watched) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := w.catchUpLocked(w.ctx, st); err != nil && w.ctx.Err() == nil {
		w.s.log.Warn("postgres: watch catch-up failed; retrying at the next poll", zap.String("session", st.id), zap.Error(err))
	}
}

// movedSQL answers which of the watched sessions ($1, each last
// published at the revision in $2) a catch-up may find news of: those
// whose row is past that revision, or gone (deleted, which its last
// events row says). By position in $1 (1-based).
const movedSQL = `SELECT w.i FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS w(id, last, i)
	WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = w.id AND s.revision <= w.last)`

// sweep catches up every watched session that moved since its last
// published revision, found for all of them in one statement, so that an
// idle watched session costs no snapshot of its own per poll. Sessions no
// longer subscribed to are forgotten (by a catch-up, which holds their
// lock).
//
// The statement runs without w.mu: it only picks sessions, each
// catch-up reading from its session's last as a notification's does. A
// session it reports idle was at most at its published revision when the
// statement ran; a change after that sends its notification, or the next
// sweep finds it. One it reports moved that a notification caught up
// meanwhile costs a catch-up that finds nothing.
func (w *watcher) sweep(ctx context.Context) {
	w.mu.Lock()
	sts := make([]*watched, 0, len(w.sessions))
	ids := make([]string, 0, len(w.sessions))
	revs := make([]int64, 0, len(w.sessions))
	for id, st := range w.sessions {
		last := st.last.Load()
		switch {
		case last == 0: // its first Watch is under way
		case !w.broker.Watched(id):
			w.scheduleLocked(st)
		default:
			sts, ids, revs = append(sts, st), append(ids, id), append(revs, int64(last))
		}
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	rows, err := w.s.pool.Query(ctx, movedSQL, uuidArgs(ids), revs)
	var moved []int64
	if err == nil {
		moved, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		if ctx.Err() == nil {
			w.s.log.Warn("postgres: watch poll failed; retrying at the next poll", zap.Int("sessions", len(ids)), zap.String("error", safeText(mapErr(err))))
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, i := range moved {
		w.scheduleLocked(sts[i-1])
	}
}

// start runs the LISTEN loop, unless it runs already or the watcher is
// closed.
func (w *watcher) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	go func() {
		defer close(w.done)
		w.listen(w.ctx)
	}()
}

// listen holds a LISTEN connection, reconnecting after failures, and
// catches up on every notification and every poll interval.
func (w *watcher) listen(ctx context.Context) {
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, w.cfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+notifyChannel)
		}
		if err != nil {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
			if ctx.Err() == nil {
				w.s.log.Warn("postgres: watch connection failed; polling until it is back", zap.String("error", safeText(mapErr(err))))
			}
			w.sweep(ctx)
			sleep(ctx, w.poll)
			continue
		}
		w.sweep(ctx) // what happened while not listening
		// A wake-up can be lost (the writer's NOTIFY failed, or its
		// notifier was behind), and other sessions' notifications, which
		// share the channel, may never let a wait time out: so every
		// watched session is swept once a poll interval all the same.
		poll := time.Now().Add(w.poll)
		for ctx.Err() == nil {
			wctx, cancel := context.WithDeadline(ctx, poll)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			switch {
			case err == nil:
				id, rev := parsePayload(n.Payload)
				w.mu.Lock()
				if st := w.sessions[id]; st != nil && (rev == 0 || rev > st.last.Load()) {
					w.scheduleLocked(st)
				}
				w.mu.Unlock()
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			default:
				if ctx.Err() == nil {
					w.s.log.Warn("postgres: watch connection lost; reconnecting", zap.String("error", safeText(mapErr(err))))
				}
				goto reconnect
			}
			if !time.Now().Before(poll) {
				w.sweep(ctx)
				poll = time.Now().Add(w.poll)
			}
		}
	reconnect:
		_ = conn.Close(context.Background())
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// close stops the LISTEN loop and the catch-ups, and ends every
// subscription with ErrClosed.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true // no new loop nor catch-up after Close
	started := w.started
	w.mu.Unlock()
	w.cancel()
	if started {
		<-w.done
	}
	w.catchUps.Wait()
	w.broker.Close()
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessiond/sessiond/storage"
)

// Group commit, as the package documentation describes it: the
// one-statement appends (appendFastSQL) that queue while a batch is
// written are written next, led by the first of them, as one transaction
// (lockBatchSQL, appendBatchSQL). What it leaves out:
//
// A batch's second append to a session is written by one more statement
// after the first's (a round): it sees the first's rows, so its
// expected_revision and ids are checked against the session after the
// first append. The write statement runs once the row locks are granted,
// on a snapshot holding every append committed before, so its ids check
// sees them all.
//
// A statement PostgreSQL refuses rolls the batch back, and each of its
// appends is retried alone by its own caller once the group has moved on
// to the next batch, so that only a locked session's append waits for
// that lock. A connection lost during the batch fails all its appends
// with ErrUnavailable, as it fails a single append: whether the COMMIT
// landed is unknown, and a retry with the same message ids is what tells.
// Once a batch holds an append, its caller waits for the batch, whose
// context ends only when every caller in it has given up.
//
// Two batches in flight may name the same session: each locks its
// sessions in the order of their ids, so the one that comes second to
// the row waits for the other's commit, and neither deadlocks. Only
// appends of different callers can meet so: an AppendStream's appends to
// one session wait for each other before they reach the Store.

// groupBatches is how many batches a Store writes at a time, each on its
// own connection: the first, and a second once groupSecondBatch appends
// wait for it. A batch runs in one PostgreSQL backend while the daemon
// answers the last batch's callers and takes the next one's requests;
// with many clients a second batch keeps the database busy meanwhile.
const groupBatches = 2

// groupSecondBatch is how many appends must wait, all of them past a
// leader's gather, before they are written beside the batch in flight
// rather than after it. A batch costs the machine, besides its appends,
// about as much CPU as five of them (its commit, its round trip, waking
// its callers), so a smaller second batch (every batch smaller, as 16
// clients leave it) costs more per append than it gains (see
// docs/performance.md, "Group commit on PostgreSQL").
const groupSecondBatch = 16

// groupLockWait is how long a batch waits for its sessions' row
// locks (lock_timeout) before the batch gives up and its appends are
// retried alone: longer than another replica's batch holds its locks, short
// enough that one busy session does not stall every append of the Store.
const groupLockWait = 100 * time.Millisecond

// groupGatherMax bounds a leader's gather: the wait for the appends a
// busy Store expects back after a batch, when some never come.
const groupGatherMax = 2 * time.Millisecond

// groupTxSettings sets, for a batch's transaction, groupLockWait and no
// hash or merge joins: the batch's arrays join the sessions table by key
// probes in a nested loop, not by a walk of a whole index of sessions,
// whatever the statistics were when the connection planned them (see
// enable_seqscan in openDriver).
var groupTxSettings = fmt.Sprintf(`SELECT set_config('lock_timeout', '%dms', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`, groupLockWait.Milliseconds())

// appendGroup is a Store's queue of one-statement appends.
type appendGroup struct {
	mu        sync.Mutex
	writing   int           // batches in hand, at most groupBatches
	gathering int           // of which still gathering, not yet written
	queue     []*fastAppend // arrived meanwhile, in order

	// The last batch's size and write time, the next gather's measure.
	expect    int
	lastWrite time.Duration
	gatherMax time.Duration // groupGatherMax; longer in tests
	gathered  chan struct{} // non-nil while a leader gathers: closed once need more are queued
	need      int

	// onBatch, set only by tests, hears of each batch of two or more
	// appends committed: how many appends, in how many statements.
	onBatch func(appends, statements int)
}

// fastAppend is one append waiting to be written by appendFastSQL, or
// with others by appendBatchSQL.
type fastAppend struct {
	ctx      context.Context
	ns, ref  string // the session's namespace, and its id or alias
	byID     bool   // ref is the id
	key      string // ns and ref: appends with one key are written in arrival order
	expected int64  // the expected revision, 0 for any
	nowNS    int64
	sent     []string // the ids the client set
	msgIDs   []string
	bodies   [][]byte
	sigs     []pgtype.Bits // the messages' search signatures
	titles   bool          // storage.CanTitle

	// Set by the leader that wrote it, before next delivers.
	done  *appended // nil: the statement updated no row
	err   error
	alone bool // the batch failed: write this append alone

	// next delivers nil once the append is written, or the batch of
	// appends queued meanwhile, for this append (their first) to lead.
	next chan []*fastAppend
}

// runFast writes a through the group and returns what its statement
// answered (nil: it updated no row).
func (s *Store) runFast(a *fastAppend) (*appended, error) {
	g := &s.group
	g.mu.Lock()
	batch := []*fastAppend{a}
	switch {
	case g.writing == 0:
		g.writing++
		g.gathering++
		g.mu.Unlock()
		batch = g.gather(batch)
	case g.writing < groupBatches && g.gathering == 0 && len(g.queue)+1 >= groupSecondBatch:
		batch = append(g.queue, a)
		g.queue = nil
		g.writing++
		g.mu.Unlock()
	default:
		g.queue = append(g.queue, a)
		if g.gathered != nil && len(g.queue) >= g.need {
			close(g.gathered)
			g.gathered = nil
		}
		g.mu.Unlock()
		select {
		case batch = <-a.next:
		case <-a.ctx.Done():
			if g.leave(a) {
				return nil, a.ctx.Err()
			}
			// A leader has taken a already: it is (being) written.
			batch = <-a.next
		}
		if batch != nil {
			batch = g.gather(batch)
		}
	}
	if batch != nil {
		s.lead(a, batch)
	}
	if a.alone {
		s.writeOne(a)
	}
	return a.done, a.err
}

// gather returns batch, which a leader is about to write, with the
// appends queued meanwhile: when batch is smaller than the last batch, it
// first waits until as many are in hand, or at most the last batch's
// write time (capped at gatherMax).
func (g *appendGroup) gather(batch []*fastAppend) []*fastAppend {
	g.mu.Lock()
	wait, need := min(g.lastWrite, g.gatherMax), g.expect-len(batch)
	if wait <= 0 || need <= 0 {
		g.gathering--
		g.mu.Unlock()
		return batch
	}
	full := make(chan struct{})
	g.gathered, g.need = full, need
	g.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-full:
	case <-t.C:
	}
	t.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gathered == full {
		g.gathered = nil
	}
	batch = append(batch, g.queue...)
	g.queue = nil
	g.gathering--
	return batch
}

// leave takes a out of the queue, if no leader has taken it yet: a caller
// that gives up while its append waits for the batch in flight returns at
// once, its append unwritten.
func (g *appendGroup) leave(a *fastAppend) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, a)
	if i < 0 {
		return false
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	return true
}

// lead writes batch (leader among it), then hands the appends queued
// meanwhile to the first of them, and wakes the others of batch. A write
// still going after groupLockWait (waiting for a row lock that another
// transaction holds) hands the queue on then, so that the other sessions'
// appends do not wait for it: for a while, one more batch is in flight.
func (s *Store) lead(leader *fastAppend, batch []*fastAppend) {
	var once sync.Once
	handOff := func() { once.Do(s.group.handOff) }
	t := time.AfterFunc(groupLockWait, handOff)
	start := time.Now()
	s.writeBatch(batch)
	t.Stop()
	g := &s.group
	g.mu.Lock()
	g.expect, g.lastWrite = len(batch), time.Since(start)
	g.mu.Unlock()
	handOff()
	for _, a := range batch {
		if a != leader {
			a.next <- nil
		}
	}
}

// handOff gives the appends queued to the first of them to write as the
// next batch, or, none queued, frees the batch's slot.
func (g *appendGroup) handOff() {
	g.mu.Lock()
	next := g.queue
	g.queue = nil
	if len(next) == 0 {
		g.writing--
	} else {
		g.gathering++
	}
	g.mu.Unlock()
	if len(next) > 0 {
		next[0].next <- next
	}
}

// writeBatch writes the appends of batch: one alone as its own statement,
// several in one transaction, and wakes the watchers of what it wrote. An
// append whose caller has given up before the batch starts is not written.
func (s *Store) writeBatch(batch []*fastAppend) {
	live := batch[:0:0]
	for _, a := range batch {
		if a.err = a.ctx.Err(); a.err == nil {
			live = append(live, a)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		s.writeOne(live[0])
		return
	}
	ctx, stop := groupContext(live)
	defer stop()
	start := time.Now()
	err := s.writeTx(ctx, live)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		// The batch's wake-ups go together, before its callers run on, so
		// that the notifier sends them in one notification transaction
		// rather than one each.
		for _, a := range live {
			s.wakeWritten(a)
		}
		s.flushed(live, time.Since(start))
	case errors.As(err, &pe):
		// The server refused one statement, so it rolled back the whole
		// batch: each append is retried alone, where only its own can
		// fail or wait, by its caller once the group has moved on.
		for _, a := range live {
			a.alone = true
		}
	default:
		for _, a := range live {
			a.done, a.err = nil, err
		}
	}
}

// writeOne writes a as its own statement and transaction, and wakes its
// session's watchers if it wrote it.
func (s *Store) writeOne(a *fastAppend) {
	q := appendFastByAlias
	if a.byID {
		q = appendFastByID
	}
	start := time.Now()
	a.done, a.err = fastResult(scanAppended(s.pool.QueryRow(a.ctx, q, a.ns, a.ref, a.expected, int64(len(a.msgIDs)), a.nowNS,
		a.sent, a.msgIDs, a.bodies, a.titles, encodeSigs(a.sigs))))
	s.wakeWritten(a)
	s.flushed([]*fastAppend{a}, time.Since(start))
}

// flushed tells the flush observer of a commit of batch that took took:
// the appends of batch it wrote, and their messages' bytes.
func (s *Store) flushed(batch []*fastAppend, took time.Duration) {
	if s.onFlush == nil {
		return
	}
	r := storage.FlushRecord{Latency: took}
	for _, a := range batch {
		if a.done != nil && a.err == nil {
			r.Appends++
			for _, b := range a.bodies {
				r.Bytes += int64(len(b))
			}
		}
	}
	if r.Appends > 0 {
		s.onFlush(r)
	}
}

// wakeWritten wakes the watchers of a's session if a was written.
func (s *Store) wakeWritten(a *fastAppend) {
	if a.done != nil && a.err == nil {
		s.wake(a.done.id, a.done.res.Revision)
	}
}

// fastResult is the outcome of one appendFastSQL row: no row, or a unique
// violation on the message key (an append of the same id committed while
// this one waited for the row lock), is no answer and no error: the
// append takes the general path.
func fastResult(m *appended, err error) (*appended, error) {
	if errors.Is(err, pgx.ErrNoRows) || uniqueViolation(err, messageKey) {
		return nil, nil
	}
	return m, err
}

// writeTx writes batch in one transaction and one round trip. On nil, each
// append's done is set (nil for an append whose statement updated no row);
// on an error nothing is written.
func (s *Store) writeTx(ctx context.Context, batch []*fastAppend) error {
	return s.onConn(ctx, func(conn *pgxpool.Conn, _ *wtx) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(groupTxSettings)
		rs := queueBatch(b, batch)
		b.Queue("COMMIT")
		if err := readTx(conn.SendBatch(ctx, b), rs); err != nil {
			return err
		}
		if s.group.onBatch != nil {
			s.group.onBatch(len(batch), b.Len())
		}
		return nil
	})
}

// readTx reads the results of writeTx's batch, written in rounds rs, and
// closes it.
func readTx(br pgx.BatchResults, rs [][]*fastAppend) error {
	_, err := br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec() // groupTxSettings
	}
	if err == nil {
		err = readBatch(br, rs)
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// groupContext returns a context for writing batch that is cancelled once
// every append's caller has given up (a batch is not cut short for the
// others when one caller leaves), and the function that releases it.
func groupContext(batch []*fastAppend) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, a := range batch {
		stops[i] = context.AfterFunc(a.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

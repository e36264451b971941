package postgres

import (
	"context"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/sessiond/sessiond/storage"
)

// OpenDriver is Open that also returns the driver under the store, for
// tests that hold its group commit.
func OpenDriver(ctx context.Context, dsn string, opts Options) (*Store, *storage.Store, error) {
	d, err := openDriver(ctx, dsn, opts)
	if err != nil {
		return nil, nil, err
	}
	c := &batchCount{}
	counts.Store(d, c)
	d.group.onBatch = func(appends, statements int) {
		c.batches.Add(1)
		c.grouped.Add(uint64(appends))
		c.statements.Add(uint64(statements))
		d.group.mu.Lock()
		c.mostWriting = max(c.mostWriting, d.group.writing)
		d.group.mu.Unlock()
	}
	return d, storage.New(d, opts.Limits), nil
}

// batchCount counts what a Store opened by OpenDriver has written in
// batches of two or more appends.
type batchCount struct {
	batches, grouped, statements atomic.Uint64
	mostWriting                  int // the most batches in hand at a commit; under the group's mu
}

// counts holds each OpenDriver Store's *batchCount.
var counts sync.Map

func countOf(d *Store) *batchCount {
	c, _ := counts.Load(d)
	return c.(*batchCount)
}

// EncodeMeta lets tests write sessions rows as the driver does.
var EncodeMeta = encodeMeta

// MessageSearch returns the condition on message_search m (and its
// arguments) that Search uses to find the messages holding query.
func MessageSearch(query string) (string, []any) {
	return newSearchFilter(query).messages(nil)
}

// MetaSearched is the condition of the session search index.
const MetaSearched = metaSearched

// ListWhere is the WHERE clause (and its arguments) List reads sessions
// with, for tests that check the indexes serve it.
var ListWhere = listWhere

// HoldAppends makes d's one-statement appends queue as though d were
// writing as many batches as it may; release waits until n appends are
// queued and has the first of them write them all as one batch, as after
// a batch, and from then on appends run as usual.
func HoldAppends(t testing.TB, d *Store) (release func(n int)) {
	g := &d.group
	g.mu.Lock()
	held := groupBatches - g.writing
	g.writing = groupBatches
	g.mu.Unlock()
	return func(n int) {
		WaitQueued(t, d, n)
		g.mu.Lock()
		g.writing -= held - 1 // the slot the queue is handed
		g.mu.Unlock()
		g.handOff()
	}
}

// Queued is how many appends wait in d's group commit queue.
func Queued(d *Store) int {
	d.group.mu.Lock()
	defer d.group.mu.Unlock()
	return len(d.group.queue)
}

// MostBatchesInFlight is the most batches d has been writing at once, as
// seen at its commits of two or more appends.
func MostBatchesInFlight(d *Store) int {
	d.group.mu.Lock()
	defer d.group.mu.Unlock()
	return countOf(d).mostWriting
}

// Grouped is how many appends d has written in batches of two or more.
func Grouped(d *Store) uint64 { return countOf(d).grouped.Load() }

// WaitQueued waits (at most 10 s) until n appends wait in d's queue.
func WaitQueued(t testing.TB, d *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); Queued(d) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued after 10 s; want %d", Queued(d), n)
		}
	}
}

// SchemaVersion is the schema version this binary creates and knows.
func SchemaVersion() int {
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	return len(names)
}

// MigrateTo brings the schema of the database dsn names to version, as a
// sessiond of that version would have left it, for tests of the upgrades
// after it.
func MigrateTo(t testing.TB, dsn string, version int32) {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	table, err := versionTableOf(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigrator(ctx, conn.Conn(), table)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
}

// Statements is how many statements d has sent to write its batches of two
// or more appends.
func Statements(d *Store) uint64 { return countOf(d).statements.Load() }

// StatsQuery is the query Stats sizes the tables with.
const StatsQuery = statsQuery

// SessionRow returns the alias, meta, label pairs and search text columns
// the driver writes for m, for tests that seed an older schema's rows.
func SessionRow(m *storage.Session) (alias any, meta []byte, labels [][]byte, search string) {
	return sessionRow(m)
}

// ListQuery is the query (and its arguments) of a listing's page.
var ListQuery = listQuery

// SearchCandidates is the query (and its arguments) of a search's page of
// candidate sessions for query in namespace ns.
func SearchCandidates(ns, query string) (string, []any) {
	return newSearchFilter(query).candidates(ns, nil)
}

// Signature is the signature of a message's search text, and whether it
// narrows a search (the text has three bytes).
var Signature = signature

// SearchText is a text as the search signature and metadata hold it.
var SearchText = searchText

// NotifyChannel is the channel the stores LISTEN and NOTIFY on.
const NotifyChannel = notifyChannel

// NotifyGap is the least time between two of a Store's notification
// transactions.
const NotifyGap = notifyGap

// ParsePayload reads a notification's text: the session's id and its
// revision.
var ParsePayload = parsePayload

// StopNotifier ends d's notifier: d's writes then wake no watcher by
// NOTIFY, as when one is lost.
func StopNotifier(d *Store) {
	d.stopNotify()
	<-d.notifyDone
}

// ListPaged is d's List with the page sizes given.
func ListPaged(ctx context.Context, d *Store, opts storage.ListOptions, first, page int64, yield func(*storage.Session) error) error {
	return d.listPaged(ctx, opts, first, page, yield)
}

// StopBackground ends d's notifier, search indexer and trimmer, so that
// only the calls a test makes use d's connections.
func StopBackground(d *Store) {
	StopNotifier(d)
	d.stopPasses()
	d.passes.Wait()
}

// AcquiredConns is how many of d's pooled connections are in use.
func AcquiredConns(d *Store) int32 { return d.pool.Stat().AcquiredConns() }

// UnindexedSQL is the search indexer's read, for plan tests.
const UnindexedSQL = unindexedSQL

// LockBatchSQL and AppendBatchSQL are a group commit's statements, for
// plan tests.
const (
	LockBatchSQL   = lockBatchSQL
	AppendBatchSQL = appendBatchSQL
)

// AppendFastByID is the one-statement append by session id, for plan
// tests.
var AppendFastByID = appendFastByID

// SetGather makes d's next leader gather as after a batch of expect
// appends that took wait to write, with no cap on the wait.
func SetGather(d *Store, expect int, wait time.Duration) {
	g := &d.group
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expect, g.lastWrite, g.gatherMax = expect, wait, wait
}

// Batches is how many batches of two or more appends d has written.
func Batches(d *Store) uint64 { return countOf(d).batches.Load() }

// LiveHistoryEvents bounds the revisions a session with an open message
// keeps in its events rows.
const LiveHistoryEvents = liveHistoryEvents

// MessageSignature is the signature message_search holds for a message.
var MessageSignature = messageSignature

// Setting is PostgreSQL's value of the parameter name on a connection of
// d's pool.
func Setting(ctx context.Context, d *Store, name string) (string, error) {
	var v string
	err := d.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

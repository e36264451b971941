package postgres

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable records the schema version, as tern keeps it.
const versionTable = "schema_migrations"

// versionTableOf names conn's version table in its current schema (the
// first of the search_path that exists, where the migrations create
// every table). Unqualified, tern would take any version table the
// search_path shows, such as another sessiond's in a later schema, and
// then leave the current schema without tables.
func versionTableOf(ctx context.Context, conn *pgx.Conn) (string, error) {
	var schema *string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("postgres: current schema: %w", mapErr(err))
	}
	if schema == nil {
		return "", errors.New("postgres: no schema of the search_path exists: create one, or name an existing one in the DSN's search_path")
	}
	if plainIdent.MatchString(*schema) {
		return *schema + "." + versionTable, nil
	}
	return pgx.Identifier{*schema}.Sanitize() + "." + versionTable, nil
}

// plainIdent matches a name PostgreSQL reads as itself unquoted.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// idleTxParam and idleTxTimeout bound how long a transaction of this
// replica may hold its locks while it sends nothing (openDriver).
const (
	idleTxParam   = "idle_in_transaction_session_timeout"
	idleTxTimeout = "30s"
)

// notifyChannel is the LISTEN/NOTIFY channel that wakes watchers.
const notifyChannel = "sessiond_events"

// historyEvents is how many events each session keeps in the events table
// for watchers resuming with a from_revision in the past; an older
// from_revision is ErrWatchReset.
const historyEvents = storage.WatchHistory

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// MaxConns bounds the pool's connections (default 16). One more
	// connection is held for LISTEN while anything is watched.
	MaxConns int32
	// MinConns keeps that many connections open when idle (default 2).
	MinConns int32
	// Logger receives connection and watch problems (default: none).
	Logger *zap.Logger
	// PollInterval is how often watched sessions are re-read even without a
	// notification (default 2s): the rows are the truth, NOTIFY only the
	// wake-up.
	PollInterval time.Duration
	// Limits are the limits the returned storage.Store enforces (zero
	// fields: storage.DefaultLimits' values).
	Limits storage.Limits
	// OnFlush, if set, is called once per commit of the group commit (one
	// append alone, or a batch) with the appends it made durable, their
	// messages' bytes and the commit's time, on the committing goroutine:
	// it must not block. Appends that take the general path (tool calls,
	// usage, live turns) are not counted.
	OnFlush func(storage.FlushRecord)
}

// Store is the PostgreSQL storage.Driver, reached only through the
// storage.Store that Open returns.
type Store struct {
	pool *pgxpool.Pool
	log  *zap.Logger
	w    *watcher

	group   appendGroup               // the one-statement appends' group commit
	onFlush func(storage.FlushRecord) // Options.OnFlush

	wakeCh     chan changed  // sessions whose watchers to wake
	stopNotify func()        // ends the notifier
	notifyDone chan struct{} // closed when the notifier has ended

	stopPasses func()         // ends the search indexer and the trimmer
	passes     sync.WaitGroup // their goroutines

	finishGrace time.Duration // how long a finish keeps its deltas' events rows
}

var _ storage.Driver = (*Store)(nil)

// Open connects to the database dsn names, creates or migrates its schema,
// and returns the store over it, which checks every request and enforces
// opts.Limits; its Ping says whether the database answers. An unreachable
// database is ErrUnavailable; a schema newer than this binary knows is an
// error that says so. Neither the DSN nor its password appears in any
// error.
func Open(ctx context.Context, dsn string, opts Options) (*storage.Store, error) {
	d, err := openDriver(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	return storage.New(d, opts.Limits), nil
}

// openDriver opens the backend alone: what Open wraps.
func openDriver(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors can quote the DSN; say only what is wrong.
		return nil, fmt.Errorf("postgres: the DSN %s does not parse (want postgres://user:password@host:port/db or key=value pairs)", Redact(dsn))
	}
	cfg.MaxConns, cfg.MinConns = 16, 2
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.MinConns > 0 {
		cfg.MinConns = opts.MinConns
	}
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	// Every write relies on read committed's row recheck: a write that
	// waited for a session's row lock sees the row as committed, where a
	// stricter default isolation would fail it with a serialization error.
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	// Every statement is prepared once per connection and planned once:
	// PostgreSQL's default replans a statement at each execution while a
	// plan for its actual arguments looks cheaper than the generic one,
	// which for the one-statement append (five tables, arrays of unknown
	// length) is always, and costs as much CPU as executing it. The
	// driver's statements are keyed lookups and index walks whose plan does
	// not depend on the values.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	// Each plan is made from the statistics of the moment it is made. On a
	// new or small sessions table those price a sequential scan below a
	// key's probe, and every append leaves a dead version of its session's
	// row until vacuum, so such a plan reads more with every append. (A
	// statement no index serves still scans: the setting only prices scans
	// up. The migrations, which rewrite whole tables, turn it back on.)
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	// A replica that stops between two statements of a transaction (frozen,
	// paused, partitioned) would hold its row locks, and every other
	// replica's writes to those sessions would wait, until PostgreSQL saw
	// the connection die. The driver's transactions never idle for more
	// than moments between statements, so PostgreSQL may end one that
	// idles this long; a DSN that sets the parameter keeps its own value.
	if _, set := cfg.ConnConfig.RuntimeParams[idleTxParam]; !set {
		cfg.ConnConfig.RuntimeParams[idleTxParam] = idleTxTimeout
	}
	cfg.AfterConnect = registerSigArray
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", mapErr(err))
	}
	if err := migrateSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	s := &Store{pool: pool, log: log, onFlush: opts.OnFlush, wakeCh: make(chan changed, wakeBuffer), notifyDone: make(chan struct{}),
		finishGrace: finishGrace}
	s.group.gatherMax = groupGatherMax
	nctx, stop := context.WithCancel(context.Background())
	s.stopNotify = stop
	go s.notifier(nctx)
	pctx, stopPasses := context.WithCancel(context.Background())
	s.stopPasses = stopPasses
	s.passes.Go(func() {
		s.repeat(pctx, s.indexPass, indexInterval, "search indexing failed; retrying (search reads what is not indexed from the messages meanwhile)")
	})
	s.passes.Go(func() {
		s.repeat(pctx, s.trimPass, trimInterval, "trimming finished turns' events failed; retrying (their rows stay meanwhile)")
	})
	poll := opts.PollInterval
	if poll <= 0 {
		poll = 2 * time.Second
	}
	s.w = newWatcher(s, cfg.ConnConfig.Copy(), poll)
	return s, nil
}

// migrateSchema brings the schema to the newest migration's version under tern's advisory
// lock, so replicas starting together migrate once.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", mapErr(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = on"); err != nil {
		return fmt.Errorf("postgres: connect: %w", mapErr(err))
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "RESET enable_seqscan") }()
	table, err := versionTableOf(ctx, conn.Conn())
	if err != nil {
		return err
	}
	m, err := migrate.NewMigrator(ctx, conn.Conn(), table)
	if err != nil {
		return fmt.Errorf("postgres: schema version table: %w", mapErr(err))
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("postgres: load migrations: %w", err)
	}
	cur, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return fmt.Errorf("postgres: read schema version: %w", mapErr(err))
	}
	if known := int32(len(m.Migrations)); cur > known {
		return fmt.Errorf("postgres: the database schema is version %d, newer than the version %d this sessiond knows; run a newer sessiond (a downgrade is never done)", cur, known)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("postgres: migrate schema from version %d: %w", cur, mapErr(err))
	}
	return nil
}

// Ping checks that the database answers; ErrUnavailable when it does not.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", mapErr(err))
	}
	return nil
}

// Close ends every subscription with ErrClosed, stops the watch listener,
// the notifier, the indexer and the trimmer, and closes the pool. The storage.Store
// calls it once, after the calls it admitted have returned.
func (s *Store) Close() error {
	s.w.close()
	s.stopNotify()
	<-s.notifyDone
	s.stopPasses()
	s.passes.Wait()
	s.pool.Close()
	return nil
}

// repeat runs pass until ctx ends: again at once while it says there is
// more, else after wait, and after wait too when it fails, which it logs
// (failed) once until a pass succeeds.
func (s *Store) repeat(ctx context.Context, pass func(context.Context) (more bool, err error), wait time.Duration, failed string) {
	failing := false
	for ctx.Err() == nil {
		more, err := pass(ctx)
		if err != nil && ctx.Err() == nil && !failing {
			s.log.Warn("postgres: "+failed, zap.String("error", safeText(mapErr(err))))
		}
		failing = err != nil
		if err != nil || !more {
			sleep(ctx, wait)
		}
	}
}

// Redact returns dsn with its password replaced by "xxxxx", for logs and
// errors. It works on text, so that a DSN that does not parse is redacted
// too: the password of a URL (scheme://user:password@...), and the value of
// password= in key=value form or a URL query.
func Redact(dsn string) string {
	dsn = urlPassword.ReplaceAllString(dsn, "${1}xxxxx@")
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

var (
	urlPassword = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)
)

// mapErr turns a pgx error into the storage sentinel it means: a full disk
// is ErrNoSpace, a lost or refused connection ErrUnavailable; the context's
// errors stay as they are. Server-side error text is kept (it names SQL, not
// credentials).
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100": // disk_full
			return fmt.Errorf("%w: %s", storage.ErrNoSpace, pe.Message)
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			return fmt.Errorf("%w: %s", storage.ErrUnavailable, pe.Message)
		}
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	// Everything else from pgx is the network or the pool: the database
	// cannot be reached right now.
	return fmt.Errorf("%w: %s", storage.ErrUnavailable, safeText(err))
}

// safeText is err's text for a client-facing wrap. pgconn's connect errors
// name host, user and database but never the password.
func safeText(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return "cannot connect to the database: " + ce.Unwrap().Error()
	}
	return err.Error()
}

// uniqueViolation reports a unique_violation of the named constraint.
func uniqueViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == constraint
}

// The "meta" column holds the client-set strings that may hold NUL (title,
// summary, metadata, labels, parent) in a compact binary form that listing
// decodes far faster than JSON: a format byte (metaFormat), then
// uvarint-length-prefixed strings: title, summary, the metadata pair count
// and its keys and values, the label pair count and its keys and values,
// and, if the session is a fork, its parent's id with the parent's message
// count as a uvarint.
//
// Format 2, written only for a session with a compaction so that a daemon
// that knows format 1 only still reads every other session, is format 1
// with a presence byte (bit 0: parent, bit 1: compaction) after the label
// pairs, then the parent as in format 1 if present, then the latest
// compaction's range: through count, through id, revision, created_at in
// Unix nanoseconds and summary id (counts as uvarints, ids as strings).
const (
	metaFormat           = 1
	metaFormatCompaction = 2
)

func encodeMeta(m *storage.Session) []byte {
	n := 16 + len(m.Title) + len(m.Summary)
	for k, v := range m.Metadata {
		n += 4 + len(k) + len(v)
	}
	for k, v := range m.Labels {
		n += 4 + len(k) + len(v)
	}
	b := make([]byte, 1, n)
	b[0] = metaFormat
	c := m.Compaction
	if c != nil {
		b[0] = metaFormatCompaction
	}
	str := func(v string) { b = append(binary.AppendUvarint(b, uint64(len(v))), v...) }
	str(m.Title)
	str(m.Summary)
	for _, kv := range []map[string]string{m.Metadata, m.Labels} {
		b = binary.AppendUvarint(b, uint64(len(kv)))
		for k, v := range kv {
			str(k)
			str(v)
		}
	}
	if c != nil {
		var present byte = 2
		if m.Parent != nil {
			present |= 1
		}
		b = append(b, present)
	}
	if m.Parent != nil {
		str(m.Parent.SessionID)
		b = binary.AppendUvarint(b, uint64(m.Parent.MessageCount))
	}
	if c != nil {
		b = binary.AppendUvarint(b, uint64(c.ThroughCount))
		str(c.ThroughID)
		b = binary.AppendUvarint(b, c.Revision)
		b = binary.AppendUvarint(b, uint64(c.CreatedAt.UnixNano()))
		str(c.SummaryID)
	}
	return b
}

// decodeMeta fills m's fields from encodeMeta's bytes.
func decodeMeta(b []byte, m *storage.Session) error {
	if len(b) == 0 || b[0] != metaFormat && b[0] != metaFormatCompaction {
		return errors.New("unknown metadata format")
	}
	format := b[0]
	b = b[1:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := uv()
		if bad || n > uint64(len(b)) {
			bad = true
			return ""
		}
		v := string(b[:n])
		b = b[n:]
		return v
	}
	pairs := func() map[string]string {
		n := uv()
		if bad || n == 0 || n > uint64(len(b)) {
			return nil
		}
		kv := make(map[string]string, n)
		for range n {
			k := str()
			kv[k] = str()
		}
		return kv
	}
	m.Title, m.Summary = str(), str()
	m.Metadata, m.Labels = pairs(), pairs()
	parent := len(b) > 0
	var present byte
	if format == metaFormatCompaction && !bad && len(b) > 0 {
		present, b = b[0], b[1:]
		parent = present&1 != 0
	}
	if parent && !bad {
		p := &storage.ForkOrigin{SessionID: str()}
		p.MessageCount = int64(uv())
		m.Parent = p
	}
	if present&2 != 0 && !bad {
		c := &storage.Compaction{ThroughCount: int64(uv()), ThroughID: str()}
		c.Revision = uv()
		c.CreatedAt = time.Unix(0, int64(uv())).UTC()
		c.SummaryID = str()
		m.Compaction = c
	} else if format == metaFormatCompaction {
		bad = true
	}
	if bad || len(b) > 0 {
		return errors.New("truncated or trailing bytes")
	}
	return nil
}

// wakeBuffer bounds the wake-ups waiting for the notifier; beyond it they
// are dropped, and watchers catch up at their next poll.
const wakeBuffer = 4096

// notifyGap is the least time between two of a Store's notification
// transactions: what a watcher may wait longer under load, against a
// transaction (and its commit record) per group-commit batch.
const notifyGap = 5 * time.Millisecond

// wake asks the notifier to NOTIFY the watchers of session id, now at
// revision rev, on every replica.
func (s *Store) wake(id string, rev uint64) {
	select {
	case s.wakeCh <- changed{id, rev}:
	default:
	}
}

// notifier sends the wake-ups in transactions of their own, at most one
// every notifyGap: under load, the wake-ups of the writes committed within
// that gap share one transaction, a session's once, with its newest
// revision. A NOTIFY inside a write's transaction would hold PostgreSQL's
// global notification lock through that commit's WAL flush and so
// serialise every write of every replica; a transaction holding only
// NOTIFYs writes only its commit record (see notifySQL) and holds it for a
// moment. A notification says only which session moved and to which
// revision (notifyPayload): the rows are the truth, and a wake-up lost (the
// process killed between the commit and the NOTIFY) only delays watchers
// until their next poll.
func (s *Store) notifier(ctx context.Context) {
	defer close(s.notifyDone)
	var sent time.Time
	for {
		var first changed
		select {
		case <-ctx.Done():
			return
		case first = <-s.wakeCh:
		}
		if wait := notifyGap - time.Since(sent); wait > 0 {
			sleep(ctx, wait)
		}
		revs := map[string]uint64{first.id: first.rev}
	drain:
		for len(revs) < 256 {
			select {
			case c := <-s.wakeCh:
				revs[c.id] = max(revs[c.id], c.rev)
			default:
				break drain
			}
		}
		payloads := make([]string, 0, len(revs))
		for id, rev := range revs {
			payloads = append(payloads, notifyPayload(id, rev))
		}
		sent = time.Now()
		if _, err := s.pool.Exec(ctx, notifySQL, payloads); err != nil && ctx.Err() == nil {
			s.log.Debug("postgres: notify failed; watchers catch up at their next poll", zap.String("error", safeText(mapErr(err))))
		}
	}
}

// notifySQL sends one notification per payload ($1), in one statement
// whatever their number. Its transaction commits without waiting for a WAL
// flush (synchronous_commit off for it alone): a NOTIFY takes a
// transaction id, so its commit writes a commit record, and a wake-up lost
// in a crash is one a watcher's poll makes up for.
const notifySQL = `SELECT pg_notify('` + notifyChannel + `', p)
	FROM set_config('synchronous_commit', 'off', true), unnest($1::text[]) AS p`

// notifyPayload is a notification's text: the session's id and its
// revision after the change, space-separated.
func notifyPayload(id string, rev uint64) string {
	return id + " " + strconv.FormatUint(rev, 10)
}

// parsePayload reads notifyPayload's text; rev is 0 when the text holds
// only an id.
func parsePayload(p string) (id string, rev uint64) {
	id, r, _ := strings.Cut(p, " ")
	rev, _ = strconv.ParseUint(r, 10, 64)
	return id, rev
}

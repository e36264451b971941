package file

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/ratelog"
	"github.com/sessiond/sessiond/storage"
)

var _ storage.Driver = (*Store)(nil)

// Option tunes a Store.
type Option func(*options)

type options struct {
	log          *zap.Logger
	foldBytes    int64
	cacheBytes   int64
	ckptInterval time.Duration
	ckptDirty    int
	maxJournals  int
	watchHistory int64
	onFlush      func(storage.FlushRecord)
	walSegment   int64
	walSpares    int // retired log segments kept for reuse; walMaxSpares but in tests
	limits       storage.Limits
}

// WithLimits sets the limits the returned storage.Store enforces (zero
// fields take storage.DefaultLimits' values).
func WithLimits(l storage.Limits) Option { return func(o *options) { o.limits = l } }

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// DefaultCacheBytes bounds the message bytes a Store keeps in memory for
// recently used sessions unless WithCacheBytes says otherwise.
const DefaultCacheBytes = 256 << 20

// WithCacheBytes bounds the message bytes kept in memory for recently used
// sessions (default DefaultCacheBytes). A session beyond it is read from
// disk again at its next use, an append to it included; the session in use
// stays, however large.
func WithCacheBytes(bytes int64) Option { return func(o *options) { o.cacheBytes = bytes } }

// DefaultMaxOpenJournals is how many journal files a Store keeps open at
// most unless WithMaxOpenJournals says otherwise.
const DefaultMaxOpenJournals = 1024

// WithMaxOpenJournals bounds the journal files kept open between writes
// (default DefaultMaxOpenJournals; values below 1 count as 1). Each session
// written keeps its journal open for its next append; past the bound the
// least recently written one is closed, and reopened (one open(2), nothing
// read) by the session's next write. The process's descriptor limit must
// leave room for this many plus one per operation in progress and a few
// more (the lock file, the current log segment).
func WithMaxOpenJournals(n int) Option { return func(o *options) { o.maxJournals = max(n, 1) } }

// WithWatchHistoryBytes bounds the watch history all sessions keep together,
// for watches that resume from a past revision (default
// storage.DefaultWatchHistoryTotal). See storage.WithHistoryTotal.
func WithWatchHistoryBytes(bytes int64) Option { return func(o *options) { o.watchHistory = bytes } }

// WithFlushObserver sets a function called once per flush of appends, on
// the flushing goroutine after the flush is durable and before the appends
// it covered are acknowledged, with what the flush covered (how many
// appends, bytes written, write+sync latency). It must not block (count,
// add to a histogram, and return): every append of that flush waits for
// it. Nil (the default) observes nothing. Whatever the observer, the
// store counts flushes itself and logs their total and mean batch size at
// Close.
func WithFlushObserver(fn func(storage.FlushRecord)) Option {
	return func(o *options) { o.onFlush = fn }
}

// Store is the file backend's storage.Driver, reached only through the
// storage.Store that Open returns. See the package doc.
type Store struct {
	dir    string
	log    *zap.Logger
	opts   options
	lock   *os.File
	broker *storage.Broker
	stats  ioStats
	reads  readStats        // message cache hits and misses (stats.go)
	disk   diskUsage        // the data dir's size, as last measured (stats.go)
	cond   *ratelog.Limiter // logs persisting conditions at a bounded rate

	// mu guards byID, ns, ckptSeq, and each entry's meta, damaged,
	// gone, key, busy and ckptSeq fields. It is held briefly, never across
	// disk I/O, and never while calling back into the caller. Lock order:
	// entry.wmu, then mu. A checkpoint holds ckptMu and takes mu, and never
	// a session's wmu. cacheMu and
	// jfiles.mu (in that order) come after wmu; holding them, other
	// sessions' wmu are only TryLocked.
	mu      sync.RWMutex
	byID    map[string]*entry
	ns      map[string]*nsIndex
	ckptSeq uint64 // sequence number of the last checkpoint begun (see checkpoint.go)

	ckptMu      sync.Mutex    // serialises checkpoints
	ckptChanged atomic.Int64  // sessions changed or created since the last checkpoint began
	ckptKick    chan struct{} // asks the checkpoint loop for a checkpoint now
	ckptStop    chan struct{} // closed by Close: the loop and the disk measurement end
	ckptDone    chan struct{} // closed by the loop when it ended

	cacheMu   sync.Mutex // guards lru, cacheSize and every entry's lruElem/cacheSize
	lru       *list.List // of *entry with a loaded view, most recent first
	cacheSize int64
	closeOnce sync.Once
	closeErr  error

	jfiles journalFiles // bounds the open journal files; see journal.go
	// pendingBytes counts the journals' frames durable in the log only
	// (see pending.go).
	pendingBytes atomic.Int64
	wal          wal // the write-ahead log shared by all sessions; see wal.go

	hooks *testHooks // nil but in tests; see hooks.go

	// How Open learnt the sessions' metadata: from the checkpoint, or by
	// scanning their files. For tests and the log.
	openTrusted, openScanned int
}

// entry is one session.
type entry struct {
	id string

	// wmu serialises the writes to this session, and the first load of its
	// files: whoever holds it owns the session's files, j, gen and ids.
	// It is held across disk I/O; readers of a loaded session never take it.
	wmu  sync.Mutex
	j    *journal
	gen  uint64
	segs *segList       // the segments the snapshot lists; nil for a whole snapshot
	ids  map[string]int // message id -> index, for idempotency checks

	// view is what readers see: replaced (never modified) by writers while
	// holding wmu; nil when the session's messages are not in memory.
	view atomic.Pointer[view]

	// Guarded by Store.mu.
	meta    *storage.Session // immutable; nil while being created, or when damaged beyond reading
	damaged error            // wraps storage.ErrDataLoss
	gone    bool             // deleted, or a create that failed
	key     listKey
	// busy: a write may have changed the files since meta was set; such a
	// session is left out of checkpoints. Cleared by setMeta, which runs
	// when meta matches the files again.
	busy    bool
	ckptSeq uint64 // the Store's ckptSeq at the session's last change: changes are counted once per checkpoint

	// qmu guards queue: appends waiting for the next group commit.
	qmu   sync.Mutex
	queue []*appendOp

	// Guarded by Store.cacheMu.
	lruElem   *list.Element
	cacheSize int64

	// jelem is e in Store.jfiles.lru while j.f is open. Guarded by
	// Store.jfiles.mu.
	jelem *list.Element

	// walReq carries each journal frame of e to the commit pipeline (see
	// writeJournal): the holder of wmu waits for its flush, so one is
	// enough, and its wake channel is made once. Made by the first write:
	// most sessions of a large store are never written in a run.
	walReq *walReq
}

// view is a consistent state of a session for readers. msgs may share its
// backing array with later views, which only append beyond len(msgs).
type view struct {
	meta *storage.Session
	// msgs are the protobuf-encoded messages, the last one replaced by
	// last when that is set: read them with at, span and all.
	msgs [][]byte
	last []byte // see replaceLast
	// lastMsg is last decoded, when last is set: the next delta's rules
	// read it (a copy of it) instead of decoding the message again.
	lastMsg *sessiondv1.Message
	size    int64 // msgsSize of the messages: kept so that touch costs no walk over them
	// cs are the session's compactions, oldest first (meta.Compaction is
	// the last's range); never modified in place.
	cs []storage.StoredCompaction
}

func newView(meta *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) *view {
	return &view{meta: meta, msgs: msgs, size: msgsSize(msgs), cs: cs}
}

// msgsSize is what msgs count against the cache budget.
func msgsSize(msgs [][]byte) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m)) + 48
	}
	return n
}

// maxVanishedLogged is how many missing session folders Open names in the
// log, one line each; a count covers the rest.
const maxVanishedLogged = 100

// Open opens (creating if needed) the data dir and returns the store over
// it, which checks every request and enforces the limits WithLimits sets.
// It fails with an error wrapping storage.ErrLocked if another store holds
// dir.
func Open(ctx context.Context, dir string, opts ...Option) (*storage.Store, error) {
	d, err := openDriver(ctx, dir, opts...)
	if err != nil {
		return nil, err
	}
	return storage.New(d, d.opts.limits), nil
}

// openDriver opens the backend alone: what Open wraps, and what this
// package's tests reach into.
func openDriver(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("file: create data dir: %w", ioErr(err))
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := openLocked(ctx, dir, lock, opts...)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

func openLocked(ctx context.Context, dir string, lock *os.File, opts ...Option) (*Store, error) {
	o := options{log: zap.NewNop(), foldBytes: 4 << 20, cacheBytes: DefaultCacheBytes,
		ckptInterval: defaultCkptInterval, ckptDirty: defaultCkptDirty, maxJournals: DefaultMaxOpenJournals,
		watchHistory: storage.DefaultWatchHistoryTotal, walSegment: walSegmentBytes, walSpares: walMaxSpares}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{
		dir: dir, log: o.log, opts: o, lock: lock, cond: ratelog.New(0), broker: storage.NewBroker(storage.WithHistoryTotal(o.watchHistory)),
		byID: make(map[string]*entry), ns: make(map[string]*nsIndex), lru: list.New(),
		ckptKick: make(chan struct{}, 1), ckptStop: make(chan struct{}), ckptDone: make(chan struct{}),
		jfiles: journalFiles{max: o.maxJournals, lru: list.New(), wake: make(chan struct{})},
	}
	start := time.Now()
	privateDir(dir, s.log)
	if err := checkFormat(&s.stats, dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"sessions", "index"} {
		if err := os.Mkdir(filepath.Join(dir, d), dirPerm); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("file: create %s: %w", d, ioErr(err))
		}
	}
	// Three things happen at once, none touching what another does: the
	// checkpoint (index/) is read; the journals (sessions/<id>/journal-*) get
	// what only the write-ahead log holds, so that scanning and loading see
	// every acknowledged change; and the session folders are listed, with
	// the leftovers of interrupted creates and deletes (sessions/.tmp-*,
	// .del-*, whose journals a replay never names) removed.
	ckc := make(chan *checkpoint, 1)
	go func() { ckc <- readCheckpoint(dir, s.log) }()
	type replayed struct {
		plan *walPlan
		lost map[string]error
		err  error
	}
	rpc := make(chan replayed, 1)
	go func() {
		plan, lost, err := s.replayWAL()
		rpc <- replayed{plan, lost, err}
	}()
	ids, err := s.sweepSessions()
	rp := <-rpc
	walStarted := false
	if rp.err == nil {
		defer func() {
			if !walStarted {
				s.closeWAL()
				s.stopWAL()
			}
		}()
	}
	if err == nil {
		err = rp.err
	}
	if err != nil {
		<-ckc
		return nil, err
	}
	lost := rp.lost
	ck := <-ckc
	var changed map[string]bool // sessions the log names since the checkpoint: true if deleted since
	if ck.ok {
		var ok bool
		if changed, ok = rp.plan.changedSince(ck.pos); !ok {
			ck.ok, ck.why = false, "the write-ahead log since the checkpoint is damaged where it names no session"
		}
	}
	if !ck.ok {
		if ck.why != "no checkpoint" || len(ids) > 0 {
			s.log.Info("no usable checkpoint; rescanning every session", zap.String("why", ck.why))
		}
		// Nothing in the index folder may be trusted again: the mark goes
		// before the stale files do.
		if err := s.distrustCheckpoint(); err != nil {
			return nil, fmt.Errorf("file: %w", err)
		}
		ck.metas, changed = nil, nil
	}

	// The checkpoint's sessions become entries, gone until their folder is
	// listed. They share one allocation, as the checkpoint's metadata
	// does: an entry dropped later keeps the others' memory, at most what
	// this open allocated.
	s.byID = make(map[string]*entry, max(len(ids), len(ck.metas)))
	known := make([]entry, len(ck.metas))
	for i, m := range ck.metas {
		e := &known[i]
		e.id, e.meta, e.gone = m.ID, m, true
		s.byID[m.ID] = e
	}
	var todo []string
	bounds := map[string]*storage.Session{} // checkpoint entries that rescans must not fall below
	for _, id := range ids {
		e := s.byID[id]
		if e == nil {
			todo = append(todo, id) // created since the checkpoint
			continue
		}
		e.gone = false
		reset, named := changed[id]
		switch {
		case !named:
			// Trusted: the entry stands.
		case !reset:
			bounds[id] = e.meta
			todo = append(todo, id)
		default:
			todo = append(todo, id)
		}
	}
	// Sessions the checkpoint knows that are gone: should their id be used
	// again, the checkpoint's entry must not stand for the new session. One
	// deleted since the checkpoint (a drop names it) needs no reset.
	var vanished []string
	for i := range known {
		e := &known[i]
		if !e.gone || s.byID[e.id] != e {
			continue
		}
		delete(s.byID, e.id)
		if changed[e.id] {
			continue
		}
		vanished = append(vanished, e.id)
		// Not deleted through the store (that writes a drop): its folder
		// was removed by hand, or lost.
		if len(vanished) <= maxVanishedLogged {
			m := e.meta
			s.log.Warn("session folder missing: the index knew this session, but it has no files (removed by hand?); it is gone",
				zap.String("session", e.id), zap.String("namespace", m.Namespace), zap.String("alias", m.Alias),
				zap.String("title", m.Title), zap.Int64("messages", m.MessageCount), zap.String("path", s.sessionDir(e.id)))
		}
	}
	if len(vanished) > maxVanishedLogged {
		s.log.Warn("more session folders missing", zap.Int("not_listed", len(vanished)-maxVanishedLogged), zap.Int("missing", len(vanished)))
	}
	if err := s.walNameAll(walKindDrop, vanished); err != nil {
		// A full disk, say: should an id come back, the checkpoint's entry
		// must not stand for it, so the next Open rescans everything.
		s.log.Warn("could not record the missing sessions as gone; the next open rescans every session", zap.Error(err))
		if err := s.distrustCheckpoint(); err != nil {
			return nil, fmt.Errorf("file: %w", err)
		}
	}
	s.ckptSeq = ck.maxSeq + 1 // past every checkpoint there is, so that every session's first change counts
	if ck.ok {
		s.walCover(ck.pos.seq)
		s.removeStale(ck.seq)
	} else {
		s.removeStale(0)
	}

	if err := s.scanSessions(ctx, todo, bounds); err != nil {
		return nil, err
	}
	for id, err := range lost {
		if e := s.byID[id]; e != nil {
			e.damaged = damage(id, err)
		}
	}
	s.buildIndexes()
	walStarted = true
	s.openTrusted, s.openScanned = len(ids)-len(todo), len(todo)
	s.log.Info("file store opened", zap.String("dir", dir), zap.Int("sessions", len(ids)),
		zap.Int("from_checkpoint", len(ids)-len(todo)), zap.Int("scanned", len(todo)), zap.Duration("took", time.Since(start)))
	// A checkpoint soon (reopenCheckpointDelay) makes the next open after a
	// crash cheap again.
	// It also retires the segments just replayed.
	go s.checkpointLoop((len(ids) > 0 && (len(todo) > 0 || len(vanished) > 0)) || len(rp.plan.segs) > 0)
	return s, nil
}

// sweepSessions lists the session folders, removing what a crash left:
// half-made sessions (.tmp-*) and half-deleted ones (.del-*).
func (s *Store) sweepSessions() ([]string, error) {
	root := filepath.Join(s.dir, "sessions")
	ids := []string{}
	err := readDirNames(root, func(name string, typ byte) error {
		switch {
		case strings.HasPrefix(name, tmpPref) || strings.HasPrefix(name, delPref):
			s.log.Info("removing leftover of an interrupted write", zap.String("path", filepath.Join(root, name)))
			if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
				return fmt.Errorf("file: sweep %s: %w", name, err)
			}
		case isSessionID(name) && direntIsDir(root, name, typ):
			ids = append(ids, name)
		default:
			s.log.Warn("ignoring unknown entry in sessions folder", zap.String("path", filepath.Join(root, name)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// direntIsDir says whether entry name of dir, of type typ as readDirNames
// gave it, is a folder: from the type, or one lstat where the file system
// did not say (DT_UNKNOWN).
func direntIsDir(dir, name string, typ byte) bool {
	if typ != unix.DT_UNKNOWN {
		return typ == unix.DT_DIR
	}
	fi, err := os.Lstat(filepath.Join(dir, name))
	return err == nil && fi.IsDir()
}

// isSessionID reports whether name is a UUID in canonical form (36
// characters, lowercase hex), as uuid's String writes it: the name of a
// session's folder. Open checks every folder and index entry with it, so it
// parses nothing and allocates nothing.
func isSessionID(name string) bool {
	if len(name) != 36 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// scanSessions reads the metadata of sessions the checkpoint did not cover:
// the snapshot's header frame and the journal, never the snapshot's
// messages. bounds holds the checkpoint's entries of sessions changed since
// (and not reset): files holding an earlier revision lost acknowledged
// changes.
func (s *Store) scanSessions(ctx context.Context, ids []string, bounds map[string]*storage.Session) error {
	if len(ids) == 0 {
		return nil
	}
	entries := make([]*entry, len(ids))
	var noFiles atomic.Pointer[error] // running out of descriptors says nothing about the session
	// buf is the journal being scanned: one per worker.
	parallel(len(ids), 4*runtime.GOMAXPROCS(0), func(buf *[]byte, i int) bool {
		if ctx.Err() != nil {
			return false
		}
		e := &entry{id: ids[i]}
		meta, err := scanSession(filepath.Join(s.dir, "sessions", ids[i]), ids[i], buf)
		if err = ioErr(err); errors.Is(err, ErrTooManyOpenFiles) {
			err = fmt.Errorf("file: scan session %s: %w", ids[i], err)
			noFiles.CompareAndSwap(nil, &err)
			return false
		}
		b := bounds[ids[i]]
		if err == nil && b != nil && meta.Revision < b.Revision {
			err = fmt.Errorf("files hold revision %d, but the checkpoint recorded revision %d: %w", meta.Revision, b.Revision, errCorrupt)
		}
		if err != nil && b != nil && (meta == nil || meta.Revision < b.Revision) {
			meta = b // the last known state keeps its alias reserved
		}
		e.meta = meta
		if err != nil {
			e.damaged = damage(ids[i], err)
			s.log.Error("session is damaged", zap.String("session", ids[i]), zap.Error(err))
		}
		entries[i] = e
		return true
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := noFiles.Load(); err != nil {
		return *err
	}
	for _, e := range entries {
		s.byID[e.id] = e
	}
	return nil
}

func damage(id string, err error) error {
	return fmt.Errorf("file: session %s: %v: %w", id, err, storage.ErrDataLoss)
}

// scanSession computes a session's metadata. On damage it returns what it
// could learn (the snapshot's metadata, if readable) with the error. It
// reads the journal into *buf (grown as needed); what it returns refers to
// none of it.
func scanSession(dir, id string, buf *[]byte) (*storage.Session, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPref) {
			_ = os.Remove(filepath.Join(dir, de.Name()))
		}
	}
	path := filepath.Join(dir, snapshotName)
	head, err := readHead(path, 4<<10)
	if err != nil {
		return nil, err
	}
	if len(head) >= frameHeader {
		if n := framedLen(int(uint32(head[0]) | uint32(head[1])<<8 | uint32(head[2])<<16 | uint32(head[3])<<24)); n > len(head) && n <= maxPayload {
			if head, err = readHead(path, n); err != nil {
				return nil, err
			}
		}
	}
	gen, meta, _, err := decodeSnapshotHeader(head)
	if err != nil {
		return nil, err
	}
	if meta.ID != id {
		return nil, fmt.Errorf("snapshot holds session %s: %w", meta.ID, errCorrupt)
	}
	data, err := readFileInto(filepath.Join(dir, journalName(gen)), *buf)
	*buf = data
	if errors.Is(err, os.ErrNotExist) {
		return meta, nil
	}
	if err != nil {
		return meta, err
	}
	jc, err := decodeJournal(data)
	if err != nil {
		return meta, err
	}
	m, _, _, err := replay(meta, nil, nil, gen, id, jc, false, true)
	if err != nil {
		return meta, err
	}
	return m, nil
}

// replay applies a journal to a snapshot's state. With withMsgs false it
// only tracks metadata (and returns no messages or compactions); with tally
// false the tallies stay as in meta.
func replay(meta *storage.Session, msgs [][]byte, cs []storage.StoredCompaction, gen uint64, id string, jc *journalContent, withMsgs, tally bool) (*storage.Session, [][]byte, []storage.StoredCompaction, error) {
	if jc.gen != gen || jc.id != id {
		return nil, nil, nil, fmt.Errorf("journal is for generation %d of %s, snapshot is generation %d of %s: %w", jc.gen, jc.id, gen, id, errCorrupt)
	}
	m := *meta
	for _, rec := range jc.records {
		if rec.rev != m.Revision+1 {
			return nil, nil, nil, fmt.Errorf("journal record has revision %d after %d: %w", rec.rev, m.Revision, errCorrupt)
		}
		switch rec.kind {
		case recAppend:
			m.Revision, m.UpdatedAt = rec.rev, rec.updatedAt
			m.MessageCount += int64(len(rec.msgs))
			if tally {
				if err := addStored(&m, rec.msgs); err != nil {
					return nil, nil, nil, err
				}
			}
			if withMsgs {
				msgs = append(msgs, rec.msgs...)
			}
		case recMeta:
			if rec.meta.ID != id || rec.meta.Revision != rec.rev || rec.meta.MessageCount != m.MessageCount {
				return nil, nil, nil, fmt.Errorf("journal metadata record does not fit the session: %w", errCorrupt)
			}
			m = *rec.meta
		case recCompact:
			c := rec.compaction
			if c.ThroughCount > m.MessageCount {
				return nil, nil, nil, fmt.Errorf("journal compaction record covers %d of %d messages: %w", c.ThroughCount, m.MessageCount, errCorrupt)
			}
			m.Revision, m.UpdatedAt = rec.rev, rec.updatedAt
			latest := c.Compaction
			m.Compaction = &latest
			if withMsgs {
				cs = append(cs[:len(cs):len(cs)], *c)
			}
		case recDelta, recClose:
			if rec.index >= uint64(m.MessageCount) {
				return nil, nil, nil, fmt.Errorf("journal record names message %d of %d: %w", rec.index, m.MessageCount, errCorrupt)
			}
			m.Revision, m.UpdatedAt = rec.rev, rec.updatedAt
			if rec.kind == recClose && tally {
				closed, err := unmarshalMessage(id, rec.msgs[0])
				if err != nil {
					return nil, nil, nil, err
				}
				m.Tally = m.Tally.CloseStored(closed)
			}
			if !withMsgs {
				break
			}
			if rec.index >= uint64(len(msgs)) {
				return nil, nil, nil, fmt.Errorf("journal record names message %d of %d: %w", rec.index, len(msgs), errCorrupt)
			}
			b := rec.msgs
			if rec.kind == recDelta {
				next, err := replayDelta(id, msgs[rec.index], rec.delta)
				if err != nil {
					return nil, nil, nil, err
				}
				b = [][]byte{next}
			}
			msgs[rec.index] = b[0]
		}
	}
	return &m, msgs, cs, nil
}

// Close ends every subscription, writes a last checkpoint (so that the
// next Open rescans nothing) and releases the data dir. The storage.Store
// calls it once its calls have returned.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.ckptStop)
		<-s.ckptDone
		s.broker.Close()
		// With no write left, the last checkpoint covers the whole log, so
		// that the sealer retires every segment.
		if err := s.checkpoint(true); err != nil {
			s.log.Warn("could not write the last checkpoint; the next open replays the log and rescans sessions", zap.Error(err))
		}
		s.closeWAL()
		s.stopWAL()
		s.closeJournalFiles()
		if f, a := s.FlushStats(); f > 0 {
			s.log.Info("file store flushes", zap.Int64("flushes", f), zap.Int64("appends", a),
				zap.Float64("mean_appends_per_flush", float64(a)/float64(f)))
		}
		s.closeErr = s.lock.Close()
	})
	return s.closeErr
}

// resolveLocked finds ref's session. Caller holds mu.
func (s *Store) resolveLocked(ref storage.Ref) (*entry, error) {
	if ref.ID != "" {
		if e := s.byID[ref.ID]; e != nil && !e.gone {
			if e.meta == nil && e.damaged != nil {
				return nil, e.damaged // its namespace is unknown
			}
			if e.meta != nil && e.meta.Namespace == ref.Namespace {
				return e, nil
			}
		}
		return nil, fmt.Errorf("file: session %s in namespace %q: %w", ref.ID, ref.Namespace, storage.ErrNotFound)
	}
	if n := s.ns[ref.Namespace]; n != nil {
		if e := n.byAlias[ref.Alias]; e != nil && !e.gone && e.meta != nil && e.meta.Alias == ref.Alias {
			return e, nil
		}
	}
	return nil, fmt.Errorf("file: session with alias %q in namespace %q: %w", ref.Alias, ref.Namespace, storage.ErrNotFound)
}

// resolve finds ref's session, validated by the caller.
func (s *Store) resolve(ref storage.Ref) (*entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.resolveLocked(ref)
}

// withSession runs fn holding the write lock of ref's session, after
// checking that ref still names it. The closure form makes forgetting to
// unlock impossible.
func (s *Store) withSession(ref storage.Ref, fn func(e *entry) error) error {
	for range 100 {
		e, err := s.resolve(ref)
		if err != nil {
			return err
		}
		e.wmu.Lock()
		s.mu.RLock()
		again, err := s.resolveLocked(ref)
		s.mu.RUnlock()
		if err != nil {
			s.unlock(e)
			return err
		}
		if again != e {
			s.unlock(e)
			continue // renamed or replaced meanwhile: look up again
		}
		err = fn(e)
		s.unlock(e)
		return err
	}
	return fmt.Errorf("session %v keeps changing identity: %w", ref, storage.ErrConflict)
}

// touch records that e's view is in memory and evicts the least recently
// used views past the cache budget. Caller holds e.wmu.
func (s *Store) touch(e *entry) {
	var size int64
	if v := e.view.Load(); v != nil {
		size = v.size
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.cacheSize += size - e.cacheSize
	e.cacheSize = size
	if e.lruElem == nil {
		e.lruElem = s.lru.PushFront(e)
	} else {
		s.lru.MoveToFront(e.lruElem)
	}
	for el := s.lru.Back(); el != nil && s.cacheSize > s.opts.cacheBytes; {
		prev := el.Prev()
		o := el.Value.(*entry)
		if o != e && o.wmu.TryLock() {
			if s.dropLocked(o) != nil {
				o.wmu.Unlock()
				el = prev
				continue // kept until its journal takes its pending frames
			}
			s.cacheSize -= o.cacheSize
			o.cacheSize = 0
			s.lru.Remove(el)
			o.lruElem = nil
			o.wmu.Unlock()
		}
		el = prev
	}
}

// forget removes e from the cache. Caller holds e.wmu.
func (s *Store) forget(e *entry) {
	if s.dropLocked(e) != nil {
		return
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if e.lruElem != nil {
		s.lru.Remove(e.lruElem)
		e.lruElem = nil
		s.cacheSize -= e.cacheSize
		e.cacheSize = 0
	}
}

// dropLocked forgets e's in-memory state; the next access reloads it. The
// journal's pending frames go to its file first: when they cannot, e keeps
// its state and the error is logged and returned. Caller holds e.wmu.
func (s *Store) dropLocked(e *entry) error {
	if err := s.settleJournal(e); err != nil {
		s.cond.Log(s.log, zapcore.WarnLevel, "settle", "could not write a session's pending journal frames; keeping the session in memory",
			zap.String("session", e.id), zap.Error(err))
		return err
	}
	e.view.Store(nil)
	s.closeJournalFile(e)
	e.j = nil
	e.ids = nil
	return nil
}

// setMeta publishes a session's new metadata to readers and the list index.
// Caller holds e.wmu.
func (s *Store) setMeta(e *entry, m *storage.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := e.meta
	if old != nil {
		n := s.nsFor(old.Namespace)
		n.remove(e)
		if old.Alias != m.Alias {
			n.release(old.Alias, e)
		}
	}
	e.meta = m
	e.busy = false // called once meta matches the files
	n := s.nsFor(m.Namespace)
	if m.Alias != "" {
		n.byAlias[m.Alias] = e
	}
	n.insert(e)
}

func (s *Store) nsFor(ns string) *nsIndex {
	n := s.ns[ns]
	if n == nil {
		n = &nsIndex{byAlias: make(map[string]*entry)}
		s.ns[ns] = n
	}
	return n
}

func (s *Store) sessionDir(id string) string { return filepath.Join(s.dir, "sessions", id) }

// nsIndex is one namespace's alias index and list order.
type nsIndex struct {
	byAlias map[string]*entry // alias -> session, including aliases reserved by writes in progress
	// list holds the namespace's readable sessions in reverse list order
	// (oldest update first), so the session an append just touched moves to
	// (or stays near) the end: a cheap move.
	list []*entry
}

// listKey is a session's position in the list order.
type listKey struct {
	t  time.Time
	id string
}

// compareKeys orders list (storage) order: UpdatedAt ascending, then ID
// descending; List walks it backwards.
func compareKeys(a, b listKey) int {
	if c := a.t.Compare(b.t); c != 0 {
		return c
	}
	return strings.Compare(b.id, a.id)
}

// search returns the position of the first session at or after k.
func (n *nsIndex) search(k listKey) int {
	i, _ := slices.BinarySearchFunc(n.list, k, func(e *entry, k listKey) int { return compareKeys(e.key, k) })
	return i
}

func (n *nsIndex) insert(e *entry) {
	e.key = listKey{t: e.meta.UpdatedAt, id: e.id}
	i := n.search(e.key)
	n.list = slices.Insert(n.list, i, e)
}

// release frees alias if e holds it.
func (n *nsIndex) release(alias string, e *entry) {
	if alias != "" && n.byAlias[alias] == e {
		delete(n.byAlias, alias)
	}
}

func (n *nsIndex) remove(e *entry) {
	i := n.search(e.key)
	if i < len(n.list) && n.list[i] == e {
		n.list = slices.Delete(n.list, i, i+1)
	}
}

// buildIndexes makes the namespace indexes from byID at open: each
// namespace's list, sorted once, then its aliases in that order. Should
// damage have made two sessions claim one alias, the one with the lower id
// keeps it, whatever the order.
func (s *Store) buildIndexes() {
	// Sized first: growing them would leave garbage as large as they are,
	// all of it fresh memory while the heap grows at start-up.
	type count struct{ sessions, aliases int }
	counts := map[string]*count{}
	for _, e := range s.byID {
		if e.meta == nil {
			continue
		}
		c := counts[e.meta.Namespace]
		if c == nil {
			c = &count{}
			counts[e.meta.Namespace] = c
		}
		c.sessions++
		if e.meta.Alias != "" {
			c.aliases++
		}
	}
	for ns, c := range counts {
		if s.ns[ns] == nil {
			s.ns[ns] = &nsIndex{byAlias: make(map[string]*entry, c.aliases), list: make([]*entry, 0, c.sessions)}
		}
	}
	for _, e := range s.byID {
		if e.meta == nil {
			continue
		}
		n := s.nsFor(e.meta.Namespace)
		e.key = listKey{t: e.meta.UpdatedAt, id: e.id}
		n.list = append(n.list, e)
	}
	for _, n := range s.ns {
		slices.SortFunc(n.list, func(a, b *entry) int { return compareKeys(a.key, b.key) })
		for _, e := range n.list {
			a := e.meta.Alias
			if a == "" {
				continue
			}
			other := n.byAlias[a]
			if other == nil {
				n.byAlias[a] = e
				continue
			}
			kept, lost := other, e
			if e.id < other.id {
				kept, lost = e, other
				n.byAlias[a] = e
			}
			s.log.Error("two sessions claim one alias; keeping the one with the lower id", zap.String("alias", a),
				zap.String("kept", kept.id), zap.String("session", lost.id))
			m := cloneMeta(lost.meta)
			m.Alias = ""
			lost.meta = m
		}
	}
}

// walNameAll writes a record of kind (a drop or a touch) for each of ids,
// durably, sharing flushes.
func (s *Store) walNameAll(kind byte, ids []string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = s.walCommit(&walReq{rec: walRec{kind: kind, id: id}}) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Package file is sessiond's default storage backend: sessions in files
// under one data dir, no daemon or database needed.
//
// Open returns a *storage.Store over the package's driver (*Store), which
// implements the primitives and receives only requests the storage.Store
// has already checked: no caller reaches the driver past those rules. One
// process holds a data dir at a time (a second Open fails with
// storage.ErrLocked).
//
// # On-disk layout
//
//	DIR/
//	  FORMAT                   "sessiond-file-format 4\n"; a data dir of any other format is refused, by Open and Check
//	  LOCK                     flock(LOCK_EX) held by the open Store; a second Open fails with ErrLocked
//	  sessions/
//	    <uuid>/                one folder per session, named by its lowercase id
//	      snapshot             the session as of generation G (see below): whole, or a list of segments
//	      journal-<G>          changes since that snapshot; G as 16 hex digits
//	      snap-<B>             segment: the whole snapshot of generation B, kept by a fold
//	      journal-<B>..<G-1>   segments: the journals that folds ended, listed by the snapshot
//	    .tmp-<uuid>-<rand>/    a create in progress; swept at Open
//	    .del-<uuid>-<rand>/    a delete in progress; swept at Open
//	  index/                   derived data, rebuilt when missing, damaged or stale
//	    clean                  checkpoint mark: sequence number S, epoch and log position P of the current checkpoint
//	    ckpt-<S>/              the checkpoint: every session's metadata as of P (alias index and listing)
//	      default              the default namespace's sessions
//	      ns-<namespace>       each named namespace's sessions
//	  wal/                     the write-ahead log shared by all sessions
//	    wal-<S>                a segment: changes not yet known durable in the journals, or not yet covered by a checkpoint; S as 16 hex digits
//	    wal-<S>.damaged        a segment found damaged at an open, kept until Check repairs it
//	    free-<S>               a spare: a retired segment's file (S was its number), kept for reuse
//	  quarantine/<time>/       what Check (fsck) with repair set aside: copies of damaged sessions' files, stray files
//
// Files are 0600, folders 0700; a data dir that existed with a looser mode
// is made 0700 at Open, with a warning in the log. Temp files (".tmp-*") are swept at Open,
// and inside a session's folder whenever the session is scanned or loaded.
// Checkpoints other than the mark's are removed once it is durable, or at
// Open after a crash. S is 16 hex digits.
//
// Every file is a sequence of frames:
//
//	uint32 LE payload length n (>= 1) | uint32 LE CRC-32C of the payload | payload | zero padding to 8 bytes
//
// payload[0] is the frame type. A whole snapshot is a header frame (type 1:
// generation, session id, the metadata as a sessiond.v1.Session proto,
// whose open_tool_call_ids, usage, models and expire_after hold the
// session's storage.Tally and idle time to live),
// message frames (type 2: a run of uvarint-length-prefixed sessiond.v1.Message
// encodings, each exactly as the client's message was marshalled, unknown
// fields included), when the session has compactions a compactions frame
// (type 17: their count, then each one's range, revision, time, summary id
// and summary message, oldest first), and an end frame (type 3: the
// message count). A segmented snapshot gets its compactions by replaying
// its segments. A
// segmented snapshot has, between its header and end frames, one segment
// list frame (type 13: base generation B, then the length and CRC-32C of
// snap-<B> and of each journal from journal-<B> to journal-<G-1>) and no
// message frames. A journal
// starts with a header frame (type 4: generation, session id) followed by
// commit frames (type 5), one per flush, each holding the records of every
// change in that flush: an append (kind 1: revision, updated_at, messages),
// a metadata change (kind 2: revision, the whole metadata), a delta to the
// open message of a live turn (kind 3: revision, updated_at, the message's
// index, the sessiond.v1.MessageDelta as applied: only the new bytes), the
// close of an open message (kind 4: revision, updated_at, the message's
// index, the closed message whole) or a compaction (kind 5: revision, then
// the compaction as in the compactions frame; the metadata's compaction
// field holds the latest one's range, never a summary). Replaying checks
// that revisions follow one another, and that each delta starts where the
// message ends. The metadata of a session with an open message also
// carries its id in field 1000, the file format's own field (not the
// API's), so that the idle sweeper finds open messages without reading any
// session. An index file is a header frame (type 6:
// epoch, entry count, namespace) and runs of Session protos (type 7). The
// mark is one frame (type 10: sequence number, epoch, and the log position
// P as a segment's sequence number and an offset in it). A WAL
// segment is a header frame (type 11: sequence number, and a salt, a random
// number chosen when the segment starts) and one batch frame (type 14) per
// flush, holding the segment's sequence number and salt, then records of 40
// bytes of header (kind: 1 a journal frame, 2 a delete, 3 a touch; a
// CRC-32C of the header alone; session id; generation; journal offset) each
// followed, for kind 1, by the journal commit frame itself. A record's
// position in the log is its segment's sequence number and its batch's
// offset. Each flush is followed by an end mark, 8 zero bytes, which the
// next flush overwrites. A batch's records start one byte past an 8-byte
// boundary, so a journal frame inside one is never read as a batch. Frame
// types 8, 9, 12, 15 and 16 are not used.
//
// # Writes
//
// An append never rewrites the session. It makes one commit frame, meant
// for the end of its session's journal, durable through the write-ahead
// log (WAL) shared by all sessions: a record naming the journal, the offset
// and the frame goes to the commit pipeline. Once the flush is durable the
// frame waits in memory for the journal's file, where a session's waiting
// frames go with one write: by its write once 64 KiB wait, by a fold,
// before the session leaves the cache, and by the sealer before it syncs
// the journal (see pending.go). So a frame whose flush failed never
// reaches the journal, and an append costs no journal write of its own. The
// first writer that finds no flush running becomes the leader: it takes
// every record queued at that moment, writes them as one batch frame with
// one write and one fdatasync, and wakes the writers it covered; writers
// that arrive meanwhile queue, and one of them leads the next flush. A
// lone writer flushes at once, and under load one flush covers every
// writer, of any session, that queued during the previous one (the
// RocksDB/Pebble commit pipeline); a leader first waits briefly for the
// writers it expects, those that kept the last flushes busy, to join it
// (see gather.go). Appends to one session that wait
// for its lock are also folded into one commit frame by the next lock
// holder. WithFlushObserver sees each flush (appends covered, bytes,
// latency). Journal space is reserved ahead with fallocate and WAL space by
// writing zeros (16 KiB, doubling, at most 1 MiB ahead) so that most
// flushes do not change the file's size. A flush into fallocated space
// converts the extents it fills, a metadata change (on ext4 a journal
// commit) at every fdatasync; the WAL, synced at every flush, writes zeros
// instead, so that its flushes overwrite written blocks and their
// fdatasync writes data only. That also keeps an aborted ext4 from
// confirming an fdatasync whose extent conversion its journal can no
// longer record, which e2fsck then reads back as zeros. Journals are
// synced once per segment, where that conversion costs little.
//
// Past 32 MiB of a segment the leader starts a new
// segment and hands the full one to a sealer goroutine, which fdatasyncs
// every journal the segment has records for; it retires the segment once,
// in addition, a durable checkpoint's position is past it (see
// "Checkpoints"). At most two segments wait for their journals' sync (the
// leader waits beyond that), and when two synced segments wait for a
// checkpoint the sealer asks for one, so the log an open must replay stays
// bounded (about five segments, 160 MiB by default, while checkpoints
// succeed; a checkpoint that fails is retried every 2 s, without holding
// up writes). The journals are synced in the background, once per segment
// rather than once per append. Close syncs everything and writes a last
// checkpoint past the whole log: a clean shutdown leaves no segment to
// replay, only spares. A delete adds a record that voids its session's
// earlier records, so that a replay never writes them into a session
// created again with the same id. Every change is written twice (journal
// and WAL); see "Costs".
//
// Segment files are recycled (PostgreSQL's wal_recycle). The sealer keeps a
// retired segment as a spare, renaming it free-<S> and syncing the folder,
// while fewer than two spares exist, and removes it otherwise. The leader
// starts its next segment in a spare when there is one: it writes the new
// header (and an end mark) over the file's start, fdatasyncs it, renames
// the spare to wal-<S> and syncs the folder; only with no spare does it
// create a new file. A recycled file's blocks already hold data, so that
// only a new file's space is written twice (zeros, then the log). The spares
// live on after Close and are used by the next Open, which removes any
// beyond two. So the log takes at most the current segment, two waiting
// for the sealer, two waiting for a checkpoint and two spares, each about
// 32 MiB plus 1 MiB reserved ahead: about 230 MiB
// while checkpoints succeed, and two spares (about 66 MiB) after a clean
// shutdown. New segments are numbered past every segment and
// spare present at Open. The store's Stats count the segments started in a
// new file and in a spare (the daemon's sessiond_store_wal_segments_total).
//
// A save, a rewind, and a fold (when the journal passes the fold threshold)
// write a new snapshot generation G+1: journal-<G+1> is created with its
// header and fsynced, the snapshot is written to a temp file, fsynced,
// renamed over "snapshot" and the folder fsynced. A save or rewind replaces
// the session's content: its snapshot is whole, and journal-<G> and the
// segments are removed after the rename. A fold copies nothing: before the
// new generation is written, journal-<G> is fdatasynced, becoming immutable
// up to its last flush, and (if the snapshot of G is whole) "snapshot" is
// hard-linked as snap-<G>; the snapshot of G+1 then lists the segments of G
// plus journal-<G> (with its length), and the metadata as of the fold. After
// the rename the space reserved past journal-<G>'s data is given back (a
// truncate, not synced: a load reads only the listed length). A crash
// before that, or a failed truncate, leaves the space to the session's next
// load, or to Check with repair: either cuts a segment longer than its
// listed length back to it when only zeros lie past it (any other bytes
// there are left as they are).
// Loading a segmented snapshot reads snap-<B>, replays the listed journals
// in order (each must hold at least its listed length, and its frames must
// fill exactly that length and pass their checksums; Check also verifies the
// listed checksum), checks that they end at the revision and message count
// the header states, then replays journal-<G+1> as usual. A snapshot is read
// with the journal of its own generation and the segments it lists only;
// other journal-* and snap-* files are leftovers of an interrupted fold or
// save, swept by the next load, so a crash at any point leaves the old state
// or the new one. When a fold finds the segments and journal holding more
// than twice the session's size plus the fold threshold (a journal full of
// metadata changes, which later ones replace), it writes the session whole
// instead. A create builds the session's folder under a temp name and
// renames it into place; a delete renames it away first.
//
// # Damage and recovery
//
// Open first replays the WAL: every record whose bytes the named journal
// lacks (a power failure lost the page cache) is written back at its
// offset, before any session is scanned or loaded; a journal that is gone
// belongs to a session since deleted or rewritten (its snapshot is durable
// and holds the change). The replayed segments are then sealed in the
// background, and retired after the checkpoint that Open asks for. After
// kill -9 the page cache survives, and only the frames that waited for
// their journals need writing: the replay reads each journal's range the
// log covers (1 MiB at a time, not one read per record) and compares,
// several journals at once.
//
// A WAL flush is one batch frame and the end mark, written after the
// previous flush is durable, over that flush's end mark and, past it, zeros
// (a new file) or a recycled file's earlier content. A batch counts only if
// it names its segment (sequence number and salt, as the header states
// them): the earlier content of a recycled file is batches of other
// segments, or parts of them, and the first frame that is not a batch of
// the segment, with no batch of the segment after it, ends the log. There
// the last flush left its end mark, unless it did not land whole: a crash
// leaves at most one incomplete batch at the end of the last segment, never
// acknowledged, which is ignored (logged). A bad batch followed by a valid
// batch of the same segment is damage; scanning resumes at that batch (at
// an 8-byte boundary), so damage never hides the flushes after it. A
// recycled file is renamed into the log only once its new header is
// durable, and a spare's old name cannot come back once the leader writes
// into it (the sealer synced the folder), so no crash while recycling
// leaves a segment whose header names another; spares are never read by
// Open or Check. Inside a damaged batch, each record whose header checksum holds is
// attributed: its frame is used if intact, and otherwise its session loses
// that change unless its journal already holds an intact frame at that
// offset; such a session answers storage.ErrDataLoss, the others are
// unaffected. The damage is logged at error level, and the segment is kept
// as wal-<seq>.damaged so that every later open marks the same sessions
// until Check repairs them. Not attributable: a record whose header is
// damaged (and the records after it in that batch); the damage is logged
// and reported by Check, and a session that loses its last change that way
// while its journal also lost it (which needs a power failure as well) is
// not marked.
//
// A journal write is frames written into zeros after the previous ones are
// in the journal, so a crash leaves at most one incomplete frame, with
// nothing valid after it: that torn tail is cut off on load (and its space
// zeroed), keeping everything before it, and the log writes back whatever
// acknowledged frames it held. Any other checksum mismatch or malformed data (a bad
// frame followed by a valid one, a damaged snapshot, a broken revision
// chain) makes that session answer storage.ErrDataLoss; every other session
// keeps working and the store still opens. Nothing damaged is skipped
// silently. (A message whose bytes happen to embed a valid frame could make a
// torn tail look like damage: that errs on the side of ErrDataLoss, never
// of wrong data.) A segment that is missing, shorter than listed, fails its
// checksum or does not parse is damage to its session likewise: segments
// are immutable, so no crash can tear them. A full disk is
// storage.ErrNoSpace, with the half-written bytes cut off again; a fold
// that fails (for a full disk or otherwise) leaves the journal as it was
// and is tried again by a later write.
//
// Check reads the WAL as part of the journals (so a journal that lacks what
// only the WAL holds is not taken for damaged), and reports damaged WAL
// segments and torn last flushes. With repair it first writes the WAL's
// records into the journals and syncs them, moves damaged segments to
// quarantine/ and removes the others; sessions that lost a change in a
// damaged segment are salvaged as below. Spares are neither findings nor
// removed.
//
// Check reads segments as a load does, names the damaged segment, and
// reports journal-* and snap-* files the snapshot does not use as orphans
// (repair moves them to quarantine/).
//
// Check with repair (sessionctl fsck --repair) salvages a damaged session:
// it copies the session's files into quarantine/, then writes the session
// back as a new, whole generation holding every frame that still passes its
// checksum (the segments' message runs and commits, the snapshot's metadata
// and message runs, the journal's commits, in order; if the segment list
// itself is damaged, the newest snap-* before the snapshot's generation and
// the journals since), at a revision above any the session had, so that a
// holder of a revision never sees it go backwards. The folder's name is the
// session's id; when the snapshot's header and every metadata record are
// damaged, the metadata comes from the last checkpoint, which holds every
// session's as of then. Only a session whose metadata is lost everywhere,
// the checkpoint included, is moved into quarantine/ whole.
//
// # Memory and start-up
//
// Open lists sessions/ and takes the metadata of most sessions from the
// last checkpoint; the others are scanned (the snapshot's header frame and
// the journal, never the snapshot's messages; of the journal's messages
// only the fields the tally and a derived title read). The checkpoint is read, the
// WAL replayed and sessions/ listed at the same time (none of the three
// touches what another does), and the checkpoint's index runs are decoded
// in parallel. After an Open that scanned sessions, the checkpoint that
// spares the next Open that scan is written 2 s later (or sooner, once
// enough sessions changed), so that it does not compete with the start of
// serving. The listing index is kept sorted per namespace in memory and
// updated by every write. A session's messages are read on first use and
// kept, as encoded bytes, in a cache of 256 MiB (least recently used
// sessions are read from disk again).
//
// # Open files
//
// Between writes the store keeps open the LOCK file, the current WAL
// segment, and the journals of at most
// WithMaxOpenJournals sessions (default
// 1,024), whatever the number of sessions. A session's journal is opened by
// its first write, not by a create or a read, and stays open for the next
// appends; past the bound the least recently written journal is closed. Its
// session keeps the write offset and the reserved size in memory, so its
// next write reopens the file with one open(2), reading and replaying
// nothing. A journal is closed only under its session's write lock, so
// never during a write to it; when every open journal's session is being
// written, a write that needs another waits for one of them to end.
// Snapshots, folders and temp files are open only during the operation
// that uses them; the sealer opens one journal at a time to sync it. The descriptor limit (ulimit -n) must therefore exceed
// the bound plus the operations in progress; an open refused for want of
// descriptors (EMFILE, ENFILE) is ErrTooManyOpenFiles, never a damaged
// session.
//
// # Checkpoints
//
// Scanning reads two files per session, so its cost grows with the store
// and with a cold page cache; start-up after a crash (kill -9, then a
// restart by systemd) relies on checkpoints instead, which bound the scan
// to the sessions written since the last one, rather than on a clean Close. A checkpoint is a copy of every session's metadata, written
// in the background 30 s after a change (or sooner once 4,096 sessions
// changed), when synced log segments wait for one (above), and by Close.
// Its mark records a position P in the WAL (etcd's WAL and snapshot: the
// snapshot names the log index it covers): every change whose metadata the checkpoint does not show is in
// the log at or after P. The log names the session of every change: an
// append or update by its journal frame, a delete by its drop record, and a
// save or rewind, whose new generation has no journal frame, by a touch
// record flushed before its files change. So an append costs one synced
// write, its WAL flush, whether or not it is its session's first change
// since a checkpoint; a save or rewind costs one flush more. Creates record
// nothing: a session the checkpoint does not know is scanned anyway.
//
// Open replays the whole log as above, trusts the checkpoint for the
// sessions that no record from P on names, scans the rest and those the
// checkpoint does not know, and drops the checkpoint's sessions that are
// gone (writing a drop record for each, so that an id used again is not
// mistaken for them). A session's revision only grows until it is deleted,
// so a checkpoint's revision is a floor: a trusted session whose files hold
// less answers ErrDataLoss when loaded, and a scanned one at once, unless a
// drop from P on says it was deleted since. Any doubt (the mark or the
// checkpoint folder missing or damaged, or damage in the log from P on that
// names no session) costs a scan of every session instead, never a guess;
// a damaged index file costs a scan of its namespace. A delete whose drop
// cannot be written removes the mark. checkpoint.go states the ordering
// rules that make P safe to trust (a watermark: the log's end, read before
// the metadata is copied, with sessions being written left out).
//
// A change whose WAL flush did not complete was never acknowledged; if its
// journal frame survived while the session is trusted, the session's
// listing shows the checkpoint's metadata until the session is first
// loaded, which reads the frame and updates it.
//
// A session's metadata is trusted without reading its files only as it
// would be after a clean Close: damage to files no write touched since the
// checkpoint is found when the session is loaded.
//
// # Costs
//
// An append writes its bytes twice (journal and WAL) and costs a share of
// one fdatasync; its journal write is shared with the session's other
// pending frames (one write per 64 KiB), and the journals' syncs happen in
// the background, once per journal per WAL segment. A fold (past 4 MiB of journal)
// copies nothing: it writes a journal header and a snapshot of the
// metadata plus 12 bytes per segment, and syncs the journal it ends. So the
// bytes written stay about twice the bytes appended at any session size
// (BenchmarkBigSession measures the ratio), where rewriting the snapshot
// at each fold would grow it with the session. A session of S bytes is
// about S/4 MiB segment files, read in order by its first load. A save or
// rewind writes the session whole, once.
package file

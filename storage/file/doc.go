// Package file is sessiond's default storage backend: sessions in files
// under one data dir, no daemon or database needed.
//
// # On-disk layout
//
//	DIR/
//	  FORMAT                   "sessiond-file-format 1\n"; any other content is refused
//	  LOCK                     flock(LOCK_EX) held by the open Store; a second Open fails with ErrLocked
//	  sessions/
//	    <uuid>/                one folder per session, named by its lowercase id
//	      snapshot             the session as of generation G (see below)
//	      journal-<G>          changes since that snapshot; G as 16 hex digits
//	    .tmp-<uuid>-<rand>/    a create in progress; swept at Open
//	    .del-<uuid>-<rand>/    a delete in progress; swept at Open
//	  index/                   derived data, rebuilt when missing, damaged or stale
//	    default                the default namespace's sessions' metadata (alias index and listing)
//	    ns-<namespace>         the same for each named namespace
//	    clean                  epoch of the index files written by the last clean Close
//	  quarantine/              what Check (fsck) with repair moved aside
//
// Files are 0600, folders 0700. Temp files (".tmp-*") are swept at Open,
// and inside a session's folder whenever the session is scanned or loaded.
//
// Every file is a sequence of frames:
//
//	uint32 LE payload length n (>= 1) | uint32 LE CRC-32C of the payload | payload | zero padding to 8 bytes
//
// payload[0] is the frame type. A snapshot is a header frame (type 1:
// generation, session id, the metadata as a sessiond.v1.Session proto),
// message frames (type 2: a run of uvarint-length-prefixed sessiond.v1.Message
// encodings, each exactly as the client's message was marshalled, unknown
// fields included), and an end frame (type 3: the message count). A journal
// starts with a header frame (type 4: generation, session id) followed by
// commit frames (type 5), one per flush, each holding the records of every
// change in that flush: an append (kind 1: revision, updated_at, messages) or
// a metadata change (kind 2: revision, the whole metadata). Replaying checks
// that revisions follow one another. An index file is a header frame (type 6:
// epoch, entry count, namespace) and runs of Session protos (type 7).
//
// # Writes
//
// An append never rewrites the session: it adds one commit frame at the end
// of the journal and fdatasyncs it. Journal space is reserved ahead with
// fallocate (16 KiB, doubling, at most 1 MiB ahead) so that most flushes do
// not change the file's size and are data-only. Appends to the same session
// that wait for its lock while a flush runs are committed together by the
// next lock holder: one frame, one fdatasync (group commit per session).
// Appends to different sessions run in parallel, each with its own flush;
// one write-ahead log shared by all sessions, which would let 16 writers on
// 16 sessions share flushes too, is not implemented.
//
// A save, a rewind, and a fold (when the journal passes the fold threshold)
// write a new snapshot generation G+1: journal-<G+1> is created with its
// header and fsynced, the snapshot is written to a temp file, fsynced,
// renamed over "snapshot" and the folder fsynced, then journal-<G> is removed.
// A snapshot is read with the journal of its own generation only, so a crash
// at any point leaves the old state or the new one. A create builds the
// session's folder under a temp name and renames it into place; a delete
// renames it away first.
//
// # Damage and recovery
//
// A flush is one frame written into zeros after the previous flush is
// durable, so a crash leaves at most one incomplete frame, with nothing valid
// after it: that torn tail is cut off on load (and its space zeroed), keeping
// everything before it. Any other checksum mismatch or malformed data (a bad
// frame followed by a valid one, a damaged snapshot, a broken revision
// chain) makes that session answer storage.ErrDataLoss; every other session
// keeps working and the store still opens. Nothing damaged is skipped
// silently. (A message whose bytes happen to embed a valid frame could make a
// torn tail look like damage: that errs on the side of ErrDataLoss, never
// of wrong data.) A full disk is storage.ErrNoSpace, with the half-written
// bytes cut off again.
//
// # Memory and start-up
//
// Open lists sessions/ and, after a clean Close, takes every session's
// metadata from the index files; sessions they do not cover are scanned
// (the snapshot's header frame and the journal, never the snapshot's
// messages). The listing index is kept sorted per namespace in memory and
// updated by every write. A session's messages are read on first use and
// kept, as encoded bytes, in a cache bounded by WithCacheBytes.
package file

// Package postgres is the scale-out storage driver: sessions in one
// PostgreSQL database that any number of sessiond replicas share, with the
// same guarantees one daemon on the file driver gives. Open returns a
// *storage.Store over the driver, which receives only valid requests.
//
// # Schema
//
// Open creates or migrates the schema from the versioned SQL files embedded
// from migrations/, with tern under its advisory lock (replicas starting
// together migrate once), in the current schema (the first of the
// search_path that exists); the version is recorded in that schema's
// schema_migrations. A database whose schema is newer than this binary
// knows is a start-up error, never a silent downgrade.
//
//   - sessions: one row per session. Client-set strings that may hold NUL
//     (title, summary, metadata, labels, parent) are in meta, in a compact
//     binary form (length-prefixed strings) that listing decodes quickly;
//     beside it are the columns that listing and search query: namespace,
//     alias (unique per namespace), updated_ns (index sessions_list on
//     namespace, updated_ns DESC, id: the list order), label_pairs (GIN) and
//     meta_search (pg_trgm GIN). Times are Unix nanoseconds. Since schema
//     version 3: tally (the session's storage.Tally as a sessiond.v1.Session
//     proto with open_tool_call_ids, usage and models; NULL for a session
//     written before, whose messages the next append recounts), models (the
//     tally's models as text[], GIN: the list's model filter) and
//     expire_after_ns (0: none; index sessions_expiry on updated_ns +
//     expire_after_ns for the retention sweeper). Since schema version 4,
//     the indexes of labels, models and alias hold only the sessions that
//     have some (partial indexes; the queries repeat the condition): an
//     append moves updated_ns, so PostgreSQL writes the row's new version
//     into every index of sessions, and an entry for an empty value served
//     no query. Since schema version 8 the same holds for meta_search's
//     index: a session with no given title, alias or summary (meta_search
//     is then just the two newlines between them) has no entry in
//     sessions_search, whose writers all serialise on its pending list.
//   - session_filters (since schema version 10): one row per session
//     holding what the GIN indexes cover, moved out of sessions:
//     label_pairs, models and meta_search, under the same index names and
//     conditions. An append writes a new version of the sessions row, and
//     with it an entry in every index of sessions the row is in; the
//     filters row, and its GIN entries, are written only when the labels,
//     the searched text or the models change. A filtered listing looks up
//     the ids the GIN index finds (id = ANY) rather than joining, which
//     PostgreSQL would do by reading every session of the namespace;
//     search matches the metadata with one key lookup per session it
//     walks in list order. A listing without filters reads sessions alone.
//   - messages: one row per message: its protobuf encoding (body; fields
//     this version does not know survive), its position and its id (unique
//     per session: idempotent appends). Since schema version 7 what search
//     needs of it is in message_search, each session's messages in order
//     up to sessions.search_count: the one-statement append writes its
//     messages' rows there itself when the session's search_count is its
//     message count, and the search indexer (indexer.go) fills in the rest
//     in batches (index sessions_unindexed: the sessions it has yet to
//     reach); search reads the messages past search_count from their rows. Since schema version
//     10 that is a 2048-bit signature of the message's lowered text (sig:
//     a bit for each three-byte window, signature.go), where it was the
//     text and a GiST index over its pg_trgm trigrams, which wrote about
//     four times the bytes (and a GiST index over such signatures reads
//     every leaf: its inner pages' unions have nearly every bit set). Search
//     walks a namespace's sessions in list order and reads a session's
//     signatures through its key; a signature only narrows the candidates,
//     which the decoded message decides. A query shorter than three bytes
//     reads every message of the namespace. There is no foreign key to
//     sessions: every write of a session's messages holds the session's
//     row lock, and Delete removes them.
//   - Since schema version 6, live turns: sessions.open_message_id is the
//     id of the session's open message (the tally's OpenMessageID; NULL
//     when none; index sessions_streaming on updated_ns of the sessions
//     that have one, for the idle sweeper). The open message is a messages
//     row that each delta and the finish rewrite in place under the
//     session's row lock (live.go); it is indexed for search once closed.
//     Since schema version 11, sessions.events_trim_ns is when a finished
//     turn's events rows past the history may go (NULL: none to trim;
//     index sessions_events_trim on the sessions that have one, for the
//     trimmer, trim.go).
//   - events: the events of each session's last storage.WatchHistory
//     revisions (more while a message is open and for a grace period
//     after its finish: see below and live.go; and the newest row before
//     them), with the session's state
//     after the change in the sessions row's columns. Since schema version
//     9 an append that changes only the revision, the message count and
//     updated_ns (the one-statement append) writes no row: its messages
//     carry the revision and updated_ns (messages.revision, NULL for every
//     other message), and its event is read from them, with the rest of the
//     session taken from the newest row before it. An append's row names
//     its messages by position rather than copying them (a copy would
//     double an append's WAL); a save or rewind, which rewrites positions,
//     first copies into its messages column the messages of every kept
//     append row it would overwrite, and writes a row, with its messages,
//     for every append in the history that wrote none, so a replay from
//     history delivers what each append added. A delta's row keeps the
//     delta as applied (delta), a finish's the closed message (messages).
//
// # Concurrency
//
// Every write is one read-committed transaction (Open sets read committed
// on its connections, whatever the database's default) that first locks
// the session's row, then applies the shared rules of package storage
// (CheckAppend, CheckRevision, SameSave, ApplyUpdate, ...) to what it read,
// so two replicas never both write on top of the same revision: the second
// waits for the first to commit and then sees its revision.
//
// An append, the hot path, is first tried as one statement (one round
// trip, its own transaction): it updates the session's row only if
// expected_revision is absent or current, no message is open and none of
// the batch's ids is stored, and inserts the messages and the event from the row it updated.
// Those conditions are the case where CheckAppend finds the whole batch
// new, so the rule stays in one place: when the statement updates nothing
// (or a concurrent append of the same ids committed first and the message
// key refuses the insert), the append takes the general path: the row lock
// and the stored messages with the batch's ids in one round trip,
// CheckAppend (which picks the messages not yet stored), then the writes
// and COMMIT in a second.
//
// One-statement appends share commits (a group commit, as the file store's
// appends share an fdatasync): the appends that arrive while a Store is
// writing queue, and when it is done the first of them writes them all as
// one transaction in one round trip of five statements, whatever their
// number: BEGIN, lock_timeout, the row locks of their sessions in the order
// of the sessions' ids, one statement that writes every append from arrays
// (a second append to a session in the batch takes one more statement),
// COMMIT. A batch smaller than the last one first waits for as many
// appends, at most the last batch's write time (2 ms at most): under load
// appends come back in waves, and the first back would otherwise be
// committed alone with the others waiting behind it. A lone client's append
// (its last batch held one) is written at once. Once 16 appends wait
// while a batch is written (many clients), they are written by a second
// batch beside it, on another connection. Each append keeps its own
// conditions and sees what the appends before it wrote, so every append is
// decided as if it ran alone in queue order (two batches in flight take
// a session they share in turn, by its row lock), and one that the statement
// does not apply takes the general path after the batch's commit. A
// statement PostgreSQL refuses (a deadlock PostgreSQL broke, the lock
// timeout) rolls the batch back, and each of its appends is retried alone.
// Locking in id order keeps two replicas' batches from deadlocking over the
// same sessions. A session's row lock held long by another transaction
// holds up only that session's appends: a batch waits at most 100 ms for
// its row locks (lock_timeout; then its appends are retried alone), and a
// write still going after 100 ms lets the next batch start. An append whose
// caller gives up while it is queued returns at once, unwritten.
//
// Creates race on the primary key and the (namespace, alias) unique key:
// exactly one wins. Reads (Get, Load) run in a read-only repeatable-read
// transaction: one snapshot. Listing and search read keyset pages of their
// indexes, with no transaction held while yield runs.
//
// # Durability
//
// A write returns nil after its transaction commits. With PostgreSQL's
// defaults (fsync = on, synchronous_commit = on) a committed transaction is
// on the server's disk; with a synchronous standby, also there.
//
// # Watch
//
// A write records its event in its transaction (an events row, or on the
// messages of a one-statement append) and, once committed, sends
// pg_notify with the session's id and new revision (outside the write's
// transaction, which would otherwise hold PostgreSQL's global notify lock
// through its commit; at most one notification transaction every
// notifyGap, holding the writes committed since the last, with no wait
// for a WAL flush). Each Store keeps one LISTEN connection while
// anything is watched; a notification of a revision it has not delivered
// makes it read that session's events after the last one it delivered,
// so watchers on every replica see every change in order without gaps.
// A poll every Options.PollInterval, and a reconnect, ask in one statement
// which watched sessions moved past what was delivered (or were deleted)
// and read those alike, so a lost notification only delays them, and
// idle watched sessions cost one statement per poll together. A watcher
// behind by any number of plain appends catches up from the messages; one
// behind a live turn's deltas, from the rows of up to liveHistoryEvents
// revisions that a session keeps while a message is open (fewer for a
// session with large metadata), which its finish keeps for a grace period
// (finishGrace) and the trimmer then takes back to storage.WatchHistory.
// A from_revision older
// than storage.WatchHistory revisions, or a gap (history trimmed, or a
// rewrite of appends no longer in it), is ErrWatchReset.
//
// # Errors
//
// A database that cannot be reached is storage.ErrUnavailable; a full disk
// storage.ErrNoSpace. Errors never contain the DSN's password.
package postgres

-- Version 1: sessions, their messages, and each session's recent events.
--
-- Strings a client sets (title, summary, metadata, labels, parent) may hold
-- NUL, which PostgreSQL text cannot, so they live in the "meta" column in a
-- binary form (length-prefixed strings); the columns beside it are what
-- listing, search and idempotency query. Times are Unix nanoseconds (exact, unlike timestamptz).
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE sessions (
	id            uuid PRIMARY KEY,
	namespace     text   NOT NULL,
	alias         text,                 -- NULL: no alias
	created_ns    bigint NOT NULL,
	updated_ns    bigint NOT NULL,
	revision      bigint NOT NULL,
	message_count bigint NOT NULL,
	meta          bytea  NOT NULL,      -- binary: title, summary, metadata, labels, parent
	label_pairs   bytea[] NOT NULL,     -- one entry per label, for containment filters
	meta_search   text   NOT NULL,      -- lowered title, alias, summary, NUL-free
	UNIQUE (namespace, alias)
);
-- The list order: newest update first, then id; keyset pages walk it.
CREATE INDEX sessions_list ON sessions (namespace, updated_ns DESC, id);
CREATE INDEX sessions_labels ON sessions USING gin (label_pairs);
CREATE INDEX sessions_search ON sessions USING gin (meta_search gin_trgm_ops);

CREATE TABLE messages (
	session_id uuid   NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pos        bigint NOT NULL,       -- 0-based index in the session
	msg_id     text   NOT NULL,
	body       bytea  NOT NULL,       -- the protobuf encoding, unknown fields kept
	search     text   NOT NULL,       -- lowered searchable text, NUL-free
	PRIMARY KEY (session_id, pos),
	UNIQUE (session_id, msg_id)      -- idempotent append
);
-- GiST, not GIN: a GIN trigram index writes every trigram of a message
-- (about one per character) at each append, some 24 KB of WAL per 1 KiB
-- message, which halves append throughput; a GiST signature (4096 bits) is
-- one index entry per message. Search rechecks every candidate, so a long
-- message whose signature fills up is only a wasted candidate, never a
-- wrong hit.
CREATE INDEX messages_search ON messages USING gist (search gist_trgm_ops (siglen = 512));

-- The last events of every session, for watchers on any replica: a write
-- adds its event in its own transaction and NOTIFYs sessiond_events; a
-- watcher reads the rows, so a lost notification loses nothing. An append's
-- event names its messages by position (first_pos, count) instead of
-- copying them, which would double an append's WAL; a save or rewind, which
-- rewrites positions, first copies the messages of the kept append events
-- it would overwrite into their messages column.
CREATE TABLE events (
	session_id uuid    NOT NULL,
	revision   bigint  NOT NULL,
	type       smallint NOT NULL,
	session    bytea   NOT NULL,     -- JSON of the session's metadata after the change
	first_pos  bigint  NOT NULL DEFAULT 0, -- an append's first message position
	count      integer NOT NULL DEFAULT 0, -- and how many it appended
	messages   bytea[],              -- their encodings, once a save or rewind rewrote the positions
	PRIMARY KEY (session_id, revision)
);

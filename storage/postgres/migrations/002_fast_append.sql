-- Version 2: an append in one statement, and a message search index that
-- costs an append little.
--
-- events: the session's state after the change is kept in columns (the
-- sessions row's own form) instead of JSON, so that an append writes its
-- event from the sessions row it updates, in the same statement. Rows
-- written by version 1 keep their JSON in "session" (NULL in new rows).
ALTER TABLE events
	ALTER COLUMN session DROP NOT NULL,
	ADD COLUMN namespace     text,
	ADD COLUMN alias         text,
	ADD COLUMN created_ns    bigint,
	ADD COLUMN updated_ns    bigint,
	ADD COLUMN message_count bigint,
	ADD COLUMN meta          bytea;

-- messages: no foreign key to sessions. Every write of a session's messages
-- holds that session's row lock, and deleting a session deletes its
-- messages in the same transaction; the key's check cost every append a
-- lookup and a lock.
ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey;
-- A row up to a page stays inline and uncompressed: a 1 KiB message with
-- its search text is just past the default 2 KB, where PostgreSQL would try
-- to compress both and then move one into the TOAST table (two more inserts).
ALTER TABLE messages SET (toast_tuple_target = 8160);

-- Message search: the pg_trgm trigrams of a message's search text as a
-- tsvector, in a GiST index whose leaf entry is a fixed-size signature
-- (256 bytes) once a message has more than about a hundred trigrams. The
-- pg_trgm GiST index of version 1 kept every trigram at the leaf (about
-- 3 KB per 1 KiB message: some 9 KB of WAL per append, and an index row
-- over 8 KB, which PostgreSQL refuses, for a message of about 12 KB of
-- varied text). A signature only narrows the candidates; search rechecks
-- each one with LIKE and then on the decoded message.
--
-- Only the first 65,536 characters are indexed (a tsvector holds at most
-- 1 MB); longer messages are always candidates, through messages_long.
-- The functions have SQL-standard bodies (PostgreSQL 14 or newer): bound to
-- pg_trgm's show_trgm when created, not looked up in each connection's
-- search_path at every insert.
CREATE FUNCTION sessiond_trgm(search text) RETURNS tsvector
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN array_to_tsvector(show_trgm(left(search, 65536)));

-- The trigrams every text containing q holds: those of q made of three
-- letters or digits in a row. Trigrams padded at q's ends (a word of q may
-- continue in the text) and hashed ones (non-ASCII: pg_trgm does not say
-- where they came from) are left out; leaving one out only widens the
-- candidates. Empty when q has no such run: such a query cannot use the index.
CREATE FUNCTION sessiond_trgm_query(q text) RETURNS tsquery
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN (SELECT coalesce(string_agg(quote_literal(t), ' & '), '')::tsquery
		FROM unnest(show_trgm(q)) AS t WHERE t ~ '^[[:alnum:]]{3}$');

DROP INDEX messages_search;
CREATE INDEX messages_search ON messages USING gist (sessiond_trgm(search) tsvector_ops (siglen = 256));
CREATE INDEX messages_long ON messages (session_id) WHERE length(search) > 65536;

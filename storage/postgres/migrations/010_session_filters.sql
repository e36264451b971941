-- Version 10: what listing filters and session search look up lives in a
-- row of its own, session_filters, apart from what every append changes.
--
-- An append changes its session's revision, message count and updated_ns,
-- the list order. PostgreSQL writes the sessions row's new version and an
-- entry for it in every index of sessions that holds the row, whether the
-- indexed value changed or not: the trigram GIN index of session search
-- (for a session with a title, alias or summary) and the GIN indexes of
-- labels and models too, about 400 bytes of WAL per append for the first
-- alone. A session_filters row holds the columns those indexes cover, and
-- is written only when they change: by a metadata update, or an append
-- that names a model the session had not used. Listing without a filter
-- reads sessions alone, as before.
CREATE TABLE session_filters (
	id          uuid    PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	label_pairs bytea[] NOT NULL,  -- one entry per label, for containment filters
	models      text[]  NOT NULL,  -- the tally's models, for the model filter
	meta_search text    NOT NULL   -- lowered title, alias, summary, NUL-free
);

INSERT INTO session_filters (id, label_pairs, models, meta_search)
SELECT id, label_pairs, models, meta_search FROM sessions;

-- The indexes move with the columns, under their names and conditions.
DROP INDEX sessions_labels;
DROP INDEX sessions_models;
DROP INDEX sessions_search;
CREATE INDEX sessions_labels ON session_filters USING gin (label_pairs) WHERE label_pairs <> '{}';
CREATE INDEX sessions_models ON session_filters USING gin (models) WHERE models <> '{}';
CREATE INDEX sessions_search ON session_filters USING gin (meta_search gin_trgm_ops) WHERE meta_search <> E'\n\n';

ALTER TABLE sessions
	DROP COLUMN label_pairs,
	DROP COLUMN models,
	DROP COLUMN meta_search;

-- Message search: a signature per message instead of its lowered text and
-- a GiST index over that text's trigrams. The indexer wrote the text
-- (about 1 KB a 1 KiB message) and a 256-byte GiST entry, whose page
-- splits wrote as much again: some 2 KB of WAL per message, half of an
-- append's. message_search.sig is a 2048-bit set with a bit for every
-- three-byte window of the text (signature.go), which search tests
-- directly (a GiST index over such signatures reads every leaf anyway:
-- the unions of its inner pages have nearly every bit set). The signatures are
-- computed by the daemon, so every message is indexed again, by the
-- indexers, after the upgrade: search reads the messages not indexed yet
-- from their rows meanwhile, and finds what it found before.
DROP INDEX messages_search;
DROP INDEX messages_long;
TRUNCATE message_search;
ALTER TABLE message_search
	DROP COLUMN search,
	ADD COLUMN sig bit(2048) NOT NULL;
UPDATE sessions SET search_count = 0, search_epoch = nextval('sessions_search_epoch') WHERE search_count > 0;
DROP FUNCTION sessiond_trgm_query(text);
DROP FUNCTION sessiond_trgm(text);

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

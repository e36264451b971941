-- Version 8: sessions without a given title, alias or summary have no entry
-- in the session search index.
--
-- Every append writes a new version of its session's row, and with it an
-- entry in every index of sessions whose condition the row meets. The
-- session search index is a GIN index, whose pending list every writer
-- serialises on; an entry for a session with nothing to search (its
-- meta_search is the two separators of its three empty fields) served no
-- query. Search says the same condition, which lets PostgreSQL use it.
DROP INDEX sessions_search;
CREATE INDEX sessions_search ON sessions USING gin (meta_search gin_trgm_ops) WHERE meta_search <> E'\n\n';

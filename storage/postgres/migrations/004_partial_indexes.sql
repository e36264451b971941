-- Version 4: sessions without labels, models or an alias have no entry in
-- those indexes.
--
-- Every append changes its session's updated_ns, which the list order
-- indexes, so PostgreSQL writes the row's new version and an entry for it
-- in every index of sessions, whether the indexed value changed or not.
-- Most sessions have no labels, no models (no message named one) or no
-- alias, and an entry for the empty value serves no query: the label and
-- model filters match only sessions that have some, an alias lookup only
-- sessions with an alias. Leaving those rows out of the three indexes
-- saves an append three index insertions (two of them into GIN pending
-- lists, which every writer serialises on) and their WAL. The queries
-- that use the indexes say the same condition, which lets PostgreSQL use
-- them.
DROP INDEX sessions_labels;
CREATE INDEX sessions_labels ON sessions USING gin (label_pairs) WHERE label_pairs <> '{}';
DROP INDEX sessions_models;
CREATE INDEX sessions_models ON sessions USING gin (models) WHERE models <> '{}';
-- Still unique per namespace, under the same name (which errors report).
ALTER TABLE sessions DROP CONSTRAINT sessions_namespace_alias_key;
CREATE UNIQUE INDEX sessions_namespace_alias_key ON sessions (namespace, alias) WHERE alias IS NOT NULL;

-- Version 5: compactions (CompactSession). A compaction is a record over a
-- range of a session's messages, which stay as they are: its summary (a
-- message's protobuf encoding) stands for the session's first
-- through_count messages in the context view. The latest compaction's range
-- is also in the session's meta (metadata format 2), so that metadata
-- answers read no row of this table; a load of the context view reads one.
CREATE TABLE compactions (
	session_id    uuid   NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq           bigint NOT NULL,  -- the order the compactions were made in: the latest has the highest
	revision      bigint NOT NULL,  -- the revision the compaction made (a fork's copies keep the source's)
	through_count bigint NOT NULL,
	through_id    text   NOT NULL,
	created_ns    bigint NOT NULL,
	summary_id    text   NOT NULL,
	summary       bytea  NOT NULL,
	PRIMARY KEY (session_id, seq)
);

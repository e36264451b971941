-- Version 7: message search off the append path.
--
-- An append writes a message's row (its protobuf encoding) and nothing
-- search needs: the message search index, a GiST index over the trigram
-- signature of each message's text, cost about half of every append.
-- Each daemon's indexer now writes that text into message_search in
-- batches, a session's messages in order: sessions.search_count says how
-- many of a session's first messages are there. Search reads the others
-- (the last ones of a busy session, and an open message, which is indexed
-- once closed) from the messages themselves, so a search finds every
-- message whether or not the indexer has reached it.
CREATE TABLE message_search (
	session_id uuid   NOT NULL,
	pos        bigint NOT NULL,
	search     text   NOT NULL,  -- lowered searchable text, NUL-free
	PRIMARY KEY (session_id, pos)
);
ALTER TABLE message_search SET (toast_tuple_target = 8160);

-- Carry the indexed text over: every message but a session's open one.
INSERT INTO message_search (session_id, pos, search)
SELECT m.session_id, m.pos, m.search FROM messages m JOIN sessions s ON s.id = m.session_id
WHERE s.open_message_id IS NULL OR m.pos < s.message_count - 1;

-- The indexes move with the text, under their names.
DROP INDEX messages_search;
DROP INDEX messages_long;
CREATE INDEX messages_search ON message_search USING gist (sessiond_trgm(search) tsvector_ops (siglen = 256));
CREATE INDEX messages_long ON message_search (session_id) WHERE length(search) > 65536;
ALTER TABLE messages DROP COLUMN search;

-- search_epoch changes whenever a session's messages are replaced (a
-- rewind, a save; a session created under a deleted one's id has a new
-- one): the indexer, which reads without locks, writes what it read only
-- if the session's search_count and search_epoch are still what it read.
CREATE SEQUENCE sessions_search_epoch;
ALTER TABLE sessions
	ADD COLUMN search_count bigint NOT NULL DEFAULT 0,
	ADD COLUMN search_epoch bigint NOT NULL DEFAULT nextval('sessions_search_epoch');
UPDATE sessions SET search_count = message_count - (open_message_id IS NOT NULL)::int;
-- The indexer's queue: the sessions with messages to index, oldest change
-- first. An open message waits until it is closed.
CREATE INDEX sessions_unindexed ON sessions (updated_ns)
	WHERE search_count < message_count - (open_message_id IS NOT NULL)::int;

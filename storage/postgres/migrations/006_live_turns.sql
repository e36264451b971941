-- Version 6: live turns. A message appended with MESSAGE_STATE_STREAMING
-- is open: always its session's last message, growing by deltas (each a
-- revision and an event) until a finish or an interrupt closes it.
--
-- sessions.open_message_id is the open message's id (NULL: none open), the
-- tally's OpenMessageID: an append to such a session, which the rules
-- refuse, never takes the one-statement path, and the idle sweeper finds
-- the open messages through sessions_streaming without reading the rest.
-- No earlier version stored an open message, so NULL is every existing
-- session's value.
ALTER TABLE sessions ADD COLUMN open_message_id text;
CREATE INDEX sessions_streaming ON sessions (updated_ns) WHERE open_message_id IS NOT NULL;

-- An event's session carries it too; a delta event keeps the delta as
-- applied (a sessiond.v1.MessageDelta's protobuf encoding), and a finish
-- event keeps the closed message in messages, where the copies of a
-- rewritten append's messages go.
ALTER TABLE events
	ADD COLUMN open_message_id text,
	ADD COLUMN delta           bytea;

-- Version 3: what a session's messages say about it (its open tool calls,
-- usage totals and models: storage.Tally), and its idle time to live.
--
-- tally holds a sessiond.v1.Session proto with only open_tool_call_ids,
-- usage and models set. Sessions written before this version have NULL
-- there: the store recounts their messages at their next write, and answers
-- an empty tally until then. models repeats the tally's models as text for
-- the list filter (model names hold no NUL: they are validated).
ALTER TABLE sessions
	ADD COLUMN tally           bytea,
	ADD COLUMN models          text[] NOT NULL DEFAULT '{}',
	ADD COLUMN expire_after_ns bigint NOT NULL DEFAULT 0; -- 0: no idle time to live of its own

-- An event's session carries them too (NULL tally: an event written before).
ALTER TABLE events
	ADD COLUMN tally           bytea,
	ADD COLUMN expire_after_ns bigint NOT NULL DEFAULT 0;

CREATE INDEX sessions_models ON sessions USING gin (models);
-- The sweeper's question for sessions with their own time to live: which
-- expire before now. Sessions under a namespace default use sessions_list.
CREATE INDEX sessions_expiry ON sessions ((updated_ns + expire_after_ns)) WHERE expire_after_ns > 0;

-- Version 11: a finished live turn's deltas leave the events table after
-- a grace period, not at the finish.
--
-- While a message is open its session keeps the events rows of up to
-- 1,024 revisions, so that a watcher on another replica that is slow for
-- a moment still reads every delta; the finish used to trim them back to
-- 64 at once, and so reset a watcher more than 64 deltas behind at the
-- end of every long turn. The finish now keeps them, and sets
-- sessions.events_trim_ns (Unix nanoseconds, by the finishing replica's
-- clock) to when they may go; each replica's trimmer takes the sessions
-- due, through sessions_events_trim, trims their rows back to 64
-- revisions and clears the column. NULL: nothing to trim, every existing
-- session's value (no earlier version kept rows past a finish).
ALTER TABLE sessions ADD COLUMN events_trim_ns bigint;
CREATE INDEX sessions_events_trim ON sessions (events_trim_ns) WHERE events_trim_ns IS NOT NULL;

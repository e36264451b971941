-- Version 9: an append that leaves its session's tally and title as they
-- are (the one-statement append) writes no events row.
--
-- Its messages carry the revision that appended them and the session's
-- updated_ns after it, and watchers read such an append from the messages
-- themselves: its session is that of the newest events row before it (the
-- append changed only the revision, the message count and updated_ns).
-- Every other change still writes its events row. The rows already stored
-- stay as they are: a revision with an events row is read from it.
ALTER TABLE messages
	ADD COLUMN revision   bigint,  -- NULL: the revision has an events row
	ADD COLUMN updated_ns bigint;

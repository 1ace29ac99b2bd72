-- An attempt's stored bytes are counted by the attempts commit (src/db/sqlite/events.ts, insertAttempts):
-- one upsert per client per commit, not one per attempt row. The delete trigger stays.
DROP TRIGGER IF EXISTS delivery_attempts_bytes_in;

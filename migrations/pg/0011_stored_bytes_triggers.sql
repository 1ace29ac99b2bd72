-- A client's stored bytes count what is written for it, not only its requests (issue #38 item 3):
-- intake counts a task's request (tasks.stored_bytes) as it decides the bound; these triggers count
-- everything written afterwards, whoever writes it: an event row per destination (its body, URL and
-- headers), each attempt's stored answer (URL, error, first 4 KiB of the answer), a task's output,
-- error and files as they change, and take it all off again when rows are deleted (pruning).
-- They append to client_storage_log rather than update client_storage: a delivery or a transition
-- never waits on another writer's lock on the client's row (src/db/pg/storage-log.ts folds them).
-- Statement triggers with transition tables: one log row per client per statement, not per row.

-- Each trigger names its rows `changed` (the new rows of an insert, the old ones of a delete).
CREATE FUNCTION genrelay_event_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes)
    SELECT client_id, CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END
      * sum(octet_length(payload) + coalesce(octet_length(callback_url), 0) + coalesce(octet_length(callback_headers), 0))
    FROM changed GROUP BY client_id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER events_bytes_in AFTER INSERT ON events REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_event_bytes();
--> statement-breakpoint
CREATE TRIGGER events_bytes_out AFTER DELETE ON events REFERENCING OLD TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_event_bytes();
--> statement-breakpoint
CREATE FUNCTION genrelay_attempt_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes)
    SELECT client_id, CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END
      * sum(octet_length(url) + coalesce(octet_length(error), 0) + coalesce(octet_length(response_body), 0))
    FROM changed GROUP BY client_id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER delivery_attempts_bytes_in AFTER INSERT ON delivery_attempts REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_attempt_bytes();
--> statement-breakpoint
CREATE TRIGGER delivery_attempts_bytes_out AFTER DELETE ON delivery_attempts REFERENCING OLD TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_attempt_bytes();
--> statement-breakpoint
-- A task's output, error and files as they change: a row trigger, run only when one of them did (the
-- WHEN is evaluated without calling the function), so claims and lease renewals cost nothing.
CREATE FUNCTION genrelay_task_output_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes) VALUES (NEW.client_id,
    coalesce(octet_length(NEW.output_json), 0) + coalesce(octet_length(NEW.error_json), 0) + coalesce(octet_length(NEW.files_json), 0)
    - coalesce(octet_length(OLD.output_json), 0) - coalesce(octet_length(OLD.error_json), 0) - coalesce(octet_length(OLD.files_json), 0));
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER tasks_output_bytes AFTER UPDATE OF output_json, error_json, files_json ON tasks FOR EACH ROW
  WHEN (OLD.output_json IS DISTINCT FROM NEW.output_json OR OLD.error_json IS DISTINCT FROM NEW.error_json
        OR OLD.files_json IS DISTINCT FROM NEW.files_json)
  EXECUTE FUNCTION genrelay_task_output_bytes();
--> statement-breakpoint
-- A deleted task takes off its request (counted by intake) and its output, error and files.
CREATE FUNCTION genrelay_task_deleted_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes)
    SELECT client_id, -sum(stored_bytes + coalesce(octet_length(output_json), 0) + coalesce(octet_length(error_json), 0) + coalesce(octet_length(files_json), 0))
    FROM old_rows GROUP BY client_id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER tasks_bytes_out AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_task_deleted_bytes();
--> statement-breakpoint
-- What databases already hold, counted once: rows written before these triggers.
INSERT INTO client_storage_log (client_id, bytes)
SELECT client_id, sum(bytes) FROM (
  SELECT client_id, octet_length(payload) + coalesce(octet_length(callback_url), 0) + coalesce(octet_length(callback_headers), 0) AS bytes FROM events
  UNION ALL
  SELECT client_id, octet_length(url) + coalesce(octet_length(error), 0) + coalesce(octet_length(response_body), 0) FROM delivery_attempts
  UNION ALL
  SELECT client_id, coalesce(octet_length(output_json), 0) + coalesce(octet_length(error_json), 0) + coalesce(octet_length(files_json), 0) FROM tasks
) AS written GROUP BY client_id HAVING sum(bytes) <> 0;

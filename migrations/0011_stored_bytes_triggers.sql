-- A client's stored bytes count what is written for it, not only its requests (issue #38 item 3):
-- intake counts a task's request (tasks.stored_bytes) as it decides the bound; these triggers count
-- everything written afterwards, whoever writes it, in the writer's own transaction: an event row
-- per destination (its body, URL and headers), each attempt's stored answer (URL, error, first
-- 4 KiB of the answer), a task's output, error and files as they change, and take it all off again
-- when rows are deleted (pruning). Bytes of UTF-8: length() of the text cast to a blob.

CREATE TRIGGER events_bytes_in AFTER INSERT ON events BEGIN
  INSERT INTO client_storage (client_id, stored_bytes) VALUES (NEW.client_id,
    length(CAST(NEW.payload AS BLOB)) + coalesce(length(CAST(NEW.callback_url AS BLOB)), 0) + coalesce(length(CAST(NEW.callback_headers AS BLOB)), 0))
  ON CONFLICT (client_id) DO UPDATE SET stored_bytes = stored_bytes + excluded.stored_bytes;
END;
--> statement-breakpoint
CREATE TRIGGER events_bytes_out AFTER DELETE ON events BEGIN
  UPDATE client_storage SET stored_bytes = stored_bytes - (
    length(CAST(OLD.payload AS BLOB)) + coalesce(length(CAST(OLD.callback_url AS BLOB)), 0) + coalesce(length(CAST(OLD.callback_headers AS BLOB)), 0))
  WHERE client_id = OLD.client_id;
END;
--> statement-breakpoint
CREATE TRIGGER delivery_attempts_bytes_in AFTER INSERT ON delivery_attempts BEGIN
  INSERT INTO client_storage (client_id, stored_bytes) VALUES (NEW.client_id,
    length(CAST(NEW.url AS BLOB)) + coalesce(length(CAST(NEW.error AS BLOB)), 0) + coalesce(length(CAST(NEW.response_body AS BLOB)), 0))
  ON CONFLICT (client_id) DO UPDATE SET stored_bytes = stored_bytes + excluded.stored_bytes;
END;
--> statement-breakpoint
CREATE TRIGGER delivery_attempts_bytes_out AFTER DELETE ON delivery_attempts BEGIN
  UPDATE client_storage SET stored_bytes = stored_bytes - (
    length(CAST(OLD.url AS BLOB)) + coalesce(length(CAST(OLD.error AS BLOB)), 0) + coalesce(length(CAST(OLD.response_body AS BLOB)), 0))
  WHERE client_id = OLD.client_id;
END;
--> statement-breakpoint
CREATE TRIGGER tasks_output_bytes AFTER UPDATE OF output_json, error_json, files_json ON tasks
  WHEN OLD.output_json IS NOT NEW.output_json OR OLD.error_json IS NOT NEW.error_json OR OLD.files_json IS NOT NEW.files_json
BEGIN
  INSERT INTO client_storage (client_id, stored_bytes) VALUES (NEW.client_id,
    coalesce(length(CAST(NEW.output_json AS BLOB)), 0) + coalesce(length(CAST(NEW.error_json AS BLOB)), 0) + coalesce(length(CAST(NEW.files_json AS BLOB)), 0)
    - coalesce(length(CAST(OLD.output_json AS BLOB)), 0) - coalesce(length(CAST(OLD.error_json AS BLOB)), 0) - coalesce(length(CAST(OLD.files_json AS BLOB)), 0))
  ON CONFLICT (client_id) DO UPDATE SET stored_bytes = stored_bytes + excluded.stored_bytes;
END;
--> statement-breakpoint
-- A deleted task takes off its request (counted by intake) and its output, error and files.
CREATE TRIGGER tasks_bytes_out AFTER DELETE ON tasks BEGIN
  UPDATE client_storage SET stored_bytes = stored_bytes - (OLD.stored_bytes
    + coalesce(length(CAST(OLD.output_json AS BLOB)), 0) + coalesce(length(CAST(OLD.error_json AS BLOB)), 0) + coalesce(length(CAST(OLD.files_json AS BLOB)), 0))
  WHERE client_id = OLD.client_id;
END;
--> statement-breakpoint
-- What databases already hold, counted once: rows written before these triggers.
INSERT INTO client_storage (client_id, stored_bytes)
SELECT client_id, sum(bytes) FROM (
  SELECT client_id, length(CAST(payload AS BLOB)) + coalesce(length(CAST(callback_url AS BLOB)), 0) + coalesce(length(CAST(callback_headers AS BLOB)), 0) AS bytes FROM events
  UNION ALL
  SELECT client_id, length(CAST(url AS BLOB)) + coalesce(length(CAST(error AS BLOB)), 0) + coalesce(length(CAST(response_body AS BLOB)), 0) FROM delivery_attempts
  UNION ALL
  SELECT client_id, coalesce(length(CAST(output_json AS BLOB)), 0) + coalesce(length(CAST(error_json AS BLOB)), 0) + coalesce(length(CAST(files_json AS BLOB)), 0) FROM tasks
) WHERE client_id IN (SELECT id FROM clients) GROUP BY client_id
ON CONFLICT (client_id) DO UPDATE SET stored_bytes = stored_bytes + excluded.stored_bytes;

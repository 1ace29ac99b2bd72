CREATE TABLE `task_output_pieces` (
	`ref` text NOT NULL,
	`seq` integer NOT NULL,
	`last` integer NOT NULL,
	`text` text NOT NULL,
	`bytes` integer NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`ref`, `seq`)
);
--> statement-breakpoint
CREATE INDEX `task_output_pieces_created_idx` ON `task_output_pieces` (`created_at`);--> statement-breakpoint
ALTER TABLE `tasks` ADD `output_ref` text;--> statement-breakpoint
CREATE INDEX `tasks_output_ref_idx` ON `tasks` (`output_ref`) WHERE output_ref IS NOT NULL;--> statement-breakpoint
-- An output kept in pieces counts toward its client's stored bytes like one in output_json
-- (0011_stored_bytes_triggers.sql): added when a task takes its ref, taken off when the task is
-- deleted. Summed from each piece's `bytes`, so the trigger never reads the text. Orphan pieces (a
-- writer killed before its transition) are never counted and are swept within the hour after.
CREATE TRIGGER tasks_output_ref_bytes AFTER UPDATE OF output_ref ON tasks
  WHEN OLD.output_ref IS NOT NEW.output_ref
BEGIN
  INSERT INTO client_storage (client_id, stored_bytes) VALUES (NEW.client_id,
    coalesce((SELECT sum(bytes) FROM task_output_pieces WHERE ref = NEW.output_ref), 0)
    - coalesce((SELECT sum(bytes) FROM task_output_pieces WHERE ref = OLD.output_ref), 0))
  ON CONFLICT (client_id) DO UPDATE SET stored_bytes = stored_bytes + excluded.stored_bytes;
END;
--> statement-breakpoint
CREATE TRIGGER tasks_output_ref_bytes_out AFTER DELETE ON tasks WHEN OLD.output_ref IS NOT NULL BEGIN
  UPDATE client_storage SET stored_bytes = stored_bytes
    - coalesce((SELECT sum(bytes) FROM task_output_pieces WHERE ref = OLD.output_ref), 0)
  WHERE client_id = OLD.client_id;
END;
